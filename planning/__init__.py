"""Pure planners: what the lab needs, derived from the config (sizes, labels, the host plan).

Imports only labconfig.
"""
