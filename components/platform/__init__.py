"""The platform on the management side: Docker network, kind cluster, MetalLB, Kamaji."""
