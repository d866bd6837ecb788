"""Pulumi components of the kamaji-hami-lab: one ComponentResource per concern."""
