"""The stack config, parsed once into a typed model; every rule names the key it checks.

The lowest layer: imports nothing of the project.
"""
