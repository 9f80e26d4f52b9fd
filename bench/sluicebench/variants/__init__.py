"""Variants: one module per variant (or family), each registering itself
with @sluicebench.core.variant."""
