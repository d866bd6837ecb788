"""Pure builders of the shell scripts the lab runs on its hosts, its manifests and Helm values.

Imports only labconfig and planning.
"""
