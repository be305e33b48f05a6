"""The tenant policy: what a ResourceClaim may ask of the node (docs/security.md).

``config`` holds the administrator's settings and their safe defaults, ``tenant`` the rules a
claim's own configuration must keep, ``binding`` ties a configuration to its allocated device.
"""
