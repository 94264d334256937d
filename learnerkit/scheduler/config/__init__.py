"""The scheduler's settings, what tenants may submit, and the tenants file."""
