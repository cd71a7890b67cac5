"""What the engine and the reference programs both speak: kubelet plugin API bindings and JSON over unix sockets.

It stands alone (no import of the engine), so a driver image holds the driver and this package, nothing of the
test engine.
"""
