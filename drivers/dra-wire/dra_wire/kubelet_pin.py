"""Which kubelet plugin APIs the bindings hold, and the k8s.io/kubelet module they are compiled from.

Plain constants, read by the build (build_hooks/dra_wire_build.py) without importing this package.
"""

KUBELET_MODULE = "k8s.io/kubelet"
# The kubelet plugin API (.proto files) of the pinned Kubernetes release (v1.37.2 ships k8s.io/kubelet v0.37.2).
KUBELET_API_VERSION = "v0.37.2"
# The module's go.sum hash (dirhash of its zip): a download that does not match it fails the build. It is the line
# `k8s.io/kubelet v0.37.2 h1:...` of the go.sum files under clusters/local/ (tests/packaging checks they agree).
KUBELET_MODULE_HASH = "h1:AaRApKAcqmMD4pxmsxdghJHbTNfOxYOIlPCARw8+01A="
# The subpackage of dra_wire the bindings are built into; their registered .proto names start with it too, so they
# cannot clash with other protobuf users.
PACKAGE = "kubeletapi"
# Path under the subpackage (an importable name) -> path of the .proto file under the module's pkg/apis.
PROTOS = {
    "dra/v1/api.proto": "dra/v1/api.proto",
    "dra/v1beta1/api.proto": "dra/v1beta1/api.proto",
    "dra_health/v1/api.proto": "dra-health/v1/api.proto",
    "dra_health/v1alpha1/api.proto": "dra-health/v1alpha1/api.proto",
    "pluginregistration/v1/api.proto": "pluginregistration/v1/api.proto",
    # The device plugin API (proto package `v1beta1`: services v1beta1.Registration and v1beta1.DevicePlugin).
    "deviceplugin/v1beta1/api.proto": "deviceplugin/v1beta1/api.proto",
}
