"""Operating a provisioned cluster: what the observe stage shows (Grafana dashboards generated from Python)."""
