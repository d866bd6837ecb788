"""One tenant: its control plane, workers, CNI, HAMi and GPU nodes (real or simulated)."""
