"""The HTTP service of the proxy (FastAPI; OpenAPI at /openapi.json)."""
