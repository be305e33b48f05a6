"""The node's inventory: its NICs (``nics``), the ResourceSlices that offer them (``slices``) and
the loop that keeps those slices published (``publisher``)."""
