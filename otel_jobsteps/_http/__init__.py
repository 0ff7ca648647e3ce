"""What the two servers (``serve``, ``collect``) share: listen addresses, the loopback
Host rule, ``/healthz`` and ``/readyz``, the access log."""
