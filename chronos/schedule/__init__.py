"""The schedule both delivery modes share: the store's writer (ledger) and the push frontier."""
