"""The host preflight: checks this host for the lab before `pulumi up` (`python -m preflight`).

A host-side tool: imports the program's layers (labconfig, planning) only downwards.
"""
