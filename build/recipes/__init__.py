"""Recipes: what an image is made of. The framework matrix as data, the rendered Dockerfile, the build inputs and the
content hash of everything that goes into an image; and a new framework folder's scaffold."""
