"""The Lightning task modules, heads, metrics and callbacks shared by the recipes."""
