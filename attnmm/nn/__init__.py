"""PyG-facing layers built on the attention core."""
