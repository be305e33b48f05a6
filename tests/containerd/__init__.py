"""dracni through a real container runtime: Debian's containerd 1.6 CRI and runc (issue 13)."""
