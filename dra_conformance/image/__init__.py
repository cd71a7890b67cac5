"""OCI image archives built by our own code, without Docker: the suite, the reference driver and Sonobuoy.

A Debian root filesystem from mmdebstrap, our wheels and the locked third-party wheels installed into it by pip,
written as deterministic layers (`oci`), cached by the digest of their inputs (`builder`).
"""
