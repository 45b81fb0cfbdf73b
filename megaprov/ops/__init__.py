"""Operating a provisioned cluster: its state (``status``, ``top``), the nodes' logs (``logs``) and failure diagnosis
(``doctor``). The observe stage's Grafana dashboards are generated at build time by ``tools/dashboards.py``."""
