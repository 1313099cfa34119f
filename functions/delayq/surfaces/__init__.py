"""What people and programs reach delayq through: the HTTP API and its gateway events, the command
line, the web view (``ui/``), Prometheus metrics, and the local stack."""
