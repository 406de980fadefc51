"""chronos proxy: the front door (Python client library and HTTP service)."""

from proxy.client import CancelReceipt, DelayClient, DelayRequest, Receipt

__all__ = ["CancelReceipt", "DelayClient", "DelayRequest", "Receipt"]
