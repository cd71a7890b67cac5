package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	healthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	healthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet reports a device's health as Unknown when it is not re-sent within health_check_timeout (default
// 30 s, k8s.io/kubelet v0.37.2 pkg/apis/dra-health/v1/api.proto): every device is re-sent this often, well within.
const healthResendInterval = 5 * time.Second

// draServices are the DRAPlugin services GetInfo lists; the kubelet picks the first it supports.
var draServices = []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}

func supportedVersions(c Config) []string {
	versions := append([]string(nil), draServices...)
	for _, version := range c.HealthServices {
		versions = append(versions, version+".DRAResourceHealth")
	}
	return versions
}

type draV1 struct {
	drav1.UnimplementedDRAPluginServer
	core *DriverCore
}

func claimsV1(claims []*drav1.Claim) []ClaimRef {
	refs := make([]ClaimRef, len(claims))
	for i, c := range claims {
		refs[i] = ClaimRef{Namespace: c.Namespace, UID: c.Uid, Name: c.Name}
	}
	return refs
}

func (s *draV1) NodePrepareResources(ctx context.Context, request *drav1.NodePrepareResourcesRequest) (*drav1.NodePrepareResourcesResponse, error) {
	results, err := s.core.PrepareHolding(claimsV1(request.Claims), heldLocksOf(ctx))
	if err != nil {
		return nil, err // a whole-call refusal: a plain error, which gRPC answers with code Unknown, as upstream's helper
	}
	response := &drav1.NodePrepareResourcesResponse{Claims: map[string]*drav1.NodePrepareResourceResponse{}}
	for uid, result := range results {
		answer := &drav1.NodePrepareResourceResponse{Error: result.Error}
		for _, device := range result.Devices {
			prepared := &drav1.Device{
				RequestNames: device.RequestNames, PoolName: device.PoolName, DeviceName: device.DeviceName,
				CdiDeviceIds: device.CDIDeviceIDs,
			}
			if device.ShareID != "" {
				prepared.ShareId = &device.ShareID
			}
			answer.Devices = append(answer.Devices, prepared)
		}
		response.Claims[uid] = answer
	}
	return response, nil
}

func (s *draV1) NodeUnprepareResources(ctx context.Context, request *drav1.NodeUnprepareResourcesRequest) (*drav1.NodeUnprepareResourcesResponse, error) {
	response := &drav1.NodeUnprepareResourcesResponse{Claims: map[string]*drav1.NodeUnprepareResourceResponse{}}
	for uid, problem := range s.core.UnprepareHolding(claimsV1(request.Claims), heldLocksOf(ctx)) {
		response.Claims[uid] = &drav1.NodeUnprepareResourceResponse{Error: problem}
	}
	return response, nil
}

type draV1beta1 struct {
	drav1beta1.UnimplementedDRAPluginServer
	core *DriverCore
}

func claimsV1beta1(claims []*drav1beta1.Claim) []ClaimRef {
	refs := make([]ClaimRef, len(claims))
	for i, c := range claims {
		refs[i] = ClaimRef{Namespace: c.Namespace, UID: c.Uid, Name: c.Name}
	}
	return refs
}

func (s *draV1beta1) NodePrepareResources(ctx context.Context, request *drav1beta1.NodePrepareResourcesRequest) (*drav1beta1.NodePrepareResourcesResponse, error) {
	results, err := s.core.PrepareHolding(claimsV1beta1(request.Claims), heldLocksOf(ctx))
	if err != nil {
		return nil, err
	}
	response := &drav1beta1.NodePrepareResourcesResponse{Claims: map[string]*drav1beta1.NodePrepareResourceResponse{}}
	for uid, result := range results {
		answer := &drav1beta1.NodePrepareResourceResponse{Error: result.Error}
		for _, device := range result.Devices { // v1beta1's Device has no share ID
			answer.Devices = append(answer.Devices, &drav1beta1.Device{
				RequestNames: device.RequestNames, PoolName: device.PoolName, DeviceName: device.DeviceName,
				CdiDeviceIds: device.CDIDeviceIDs,
			})
		}
		response.Claims[uid] = answer
	}
	return response, nil
}

func (s *draV1beta1) NodeUnprepareResources(ctx context.Context, request *drav1beta1.NodeUnprepareResourcesRequest) (*drav1beta1.NodeUnprepareResourcesResponse, error) {
	response := &drav1beta1.NodeUnprepareResourcesResponse{Claims: map[string]*drav1beta1.NodeUnprepareResourceResponse{}}
	for uid, problem := range s.core.UnprepareHolding(claimsV1beta1(request.Claims), heldLocksOf(ctx)) {
		response.Claims[uid] = &drav1beta1.NodeUnprepareResourceResponse{Error: problem}
	}
	return response, nil
}

// streamHealth sends every device's health at once, again on each change, and at least every
// healthResendInterval, until the caller goes.
func streamHealth(ctx context.Context, core *DriverCore, send func([]deviceHealth) error) error {
	started := time.Now()
	defer core.calls.Record("NodeWatchResources", started, nil, "closed", nil)
	for {
		changed := core.HealthChanged() // before reading the health: a change after the read still wakes the wait
		if err := send(core.Health()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(healthResendInterval):
		}
	}
}

type healthV1 struct {
	healthv1.UnimplementedDRAResourceHealthServer
	core *DriverCore
}

func (s *healthV1) NodeWatchResources(_ *healthv1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[healthv1.NodeWatchResourcesResponse]) error {
	pool := s.core.HealthPool()
	return streamHealth(stream.Context(), s.core, func(devices []deviceHealth) error {
		response := &healthv1.NodeWatchResourcesResponse{}
		for _, d := range devices {
			health := healthv1.HealthStatus_HEALTHY
			if !d.healthy {
				health = healthv1.HealthStatus_UNHEALTHY
			}
			response.Devices = append(response.Devices, &healthv1.DeviceHealth{
				Device: &healthv1.DeviceIdentifier{PoolName: pool, DeviceName: d.device},
				Health: health, LastUpdatedTime: time.Now().Unix(), Message: d.message,
			})
		}
		return stream.Send(response)
	})
}

type healthV1alpha1 struct {
	healthv1alpha1.UnimplementedDRAResourceHealthServer
	core *DriverCore
}

func (s *healthV1alpha1) NodeWatchResources(_ *healthv1alpha1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[healthv1alpha1.NodeWatchResourcesResponse]) error {
	pool := s.core.HealthPool()
	return streamHealth(stream.Context(), s.core, func(devices []deviceHealth) error {
		response := &healthv1alpha1.NodeWatchResourcesResponse{}
		for _, d := range devices {
			health := healthv1alpha1.HealthStatus_HEALTHY
			if !d.healthy {
				health = healthv1alpha1.HealthStatus_UNHEALTHY
			}
			response.Devices = append(response.Devices, &healthv1alpha1.DeviceHealth{
				Device: &healthv1alpha1.DeviceIdentifier{PoolName: pool, DeviceName: d.device},
				Health: health, LastUpdatedTime: time.Now().Unix(), Message: d.message,
			})
		}
		return stream.Send(response)
	})
}

type registrationServer struct {
	registration.UnimplementedRegistrationServer
	core *DriverCore
}

func (s *registrationServer) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	s.core.calls.Record("GetInfo", time.Now(), nil, "ok", nil)
	c := s.core.config
	name := c.DriverName
	if c.IsBroken(registersProductName) {
		name = productCDIVendor // the bug: the product's name, not the driver name its slices use
	}
	return &registration.PluginInfo{
		Type: "DRAPlugin", Name: name, Endpoint: c.DRASocket(), SupportedVersions: supportedVersions(c),
	}, nil
}

func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, request *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	outcome := "registered"
	if !request.PluginRegistered {
		outcome = "rejected: " + request.Error
	}
	s.core.calls.Record("NotifyRegistrationStatus", time.Now(), nil, outcome, nil)
	if request.PluginRegistered {
		s.core.Registered()
	}
	return &registration.RegistrationStatusResponse{}, nil
}

// listenUnix listens on `path`, replacing a socket a crashed predecessor left.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	return net.Listen("unix", path)
}

// startGRPC serves the DRA socket first, then the registration socket (its appearance tells the kubelet to
// connect). The protocol-level faults, and the call log of NodePrepareResources and NodeUnprepareResources, are
// their servers' unary interceptors (interceptors.go).
func startGRPC(core *DriverCore) ([]*grpc.Server, error) {
	c := core.config
	dra := grpc.NewServer(grpc.ChainUnaryInterceptor(logClaimCalls(core), claimFaults(core)))
	drav1.RegisterDRAPluginServer(dra, &draV1{core: core})
	drav1beta1.RegisterDRAPluginServer(dra, &draV1beta1{core: core})
	for _, version := range servedHealthVersions(c) { // the versions GetInfo lists (but for a broken mode)
		switch version {
		case "v1":
			healthv1.RegisterDRAResourceHealthServer(dra, &healthV1{core: core})
		case "v1alpha1":
			healthv1alpha1.RegisterDRAResourceHealthServer(dra, &healthV1alpha1{core: core})
		}
	}
	draListener, err := listenUnix(c.DRASocket())
	if err != nil {
		return nil, err
	}
	go func() { _ = dra.Serve(draListener) }()
	registrar := grpc.NewServer(grpc.UnaryInterceptor(registrationFaults(core)))
	registration.RegisterRegistrationServer(registrar, &registrationServer{core: core})
	registrationListener, err := listenUnix(c.RegistrationSocket())
	if err != nil {
		dra.Stop()
		return nil, err
	}
	go func() { _ = registrar.Serve(registrationListener) }()
	return []*grpc.Server{registrar, dra}, nil
}
