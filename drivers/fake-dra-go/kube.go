package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
)

const (
	// requestTimeout bounds one call to the API server: a slow server fails the prepare, it does not hang it.
	requestTimeout = 10 * time.Second
	// publishWorkers: slices of one pool written at once (a 1,000-device pool is eight slices, one round).
	publishWorkers = 8
)

// DriverAPI is the driver's API access: read claims, write its own status.devices entries, publish its pool.
type DriverAPI struct {
	client     kubernetes.Interface
	driverName string
	nodeOwners sync.Map // node name -> *metav1.OwnerReference (nil: no such Node); a Node's UID does not change
}

// newDriverAPI connects with the kubeconfig (in-cluster when empty). Without --api-qps the client is not rate
// limited; with it, client-go's own token bucket applies, as most Go drivers have it.
func newDriverAPI(c Config) (*DriverAPI, error) {
	var config *rest.Config
	var err error
	if c.Kubeconfig == "" {
		config, err = rest.InClusterConfig()
	} else {
		config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	if c.APIQPS > 0 {
		config.QPS, config.Burst = float32(c.APIQPS), c.APIBurst
	} else {
		config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	}
	config.UserAgent = "fake-dra-go/" + c.DriverVersion
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &DriverAPI{client: client, driverName: c.DriverName}, nil
}

func withTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), requestTimeout)
}

// denial is the API server's message for a failed request (e.g. the Forbidden text).
func denial(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// GetClaim reads one claim.
func (a *DriverAPI) GetClaim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	ctx, cancel := withTimeout()
	defer cancel()
	return a.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// ApplyDeviceStatus server-side applies this driver's status.devices entries (an empty list removes them).
//
// status.devices is a map-list keyed by driver/pool/device/shareID, so applying only this driver's entries under
// its own field manager leaves other drivers' entries alone. The UID makes the write a precondition on the exact
// claim that was prepared.
func (a *DriverAPI) ApplyDeviceStatus(claim *resourceapi.ResourceClaim, entries []map[string]any) error {
	if entries == nil {
		entries = []map[string]any{}
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "ResourceClaim",
		"metadata":   map[string]any{"name": claim.Name, "namespace": claim.Namespace, "uid": claim.UID},
		"status":     map[string]any{"devices": entries},
	})
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout()
	defer cancel()
	options := metav1.PatchOptions{FieldManager: a.driverName, Force: ptr.To(true)}
	_, err = a.client.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.ApplyPatchType, body, options, "status")
	return err
}

// ListSlices returns every ResourceSlice of this driver on `node` (its pool, and any left by earlier runs).
func (a *DriverAPI) ListSlices(node string) ([]resourceapi.ResourceSlice, error) {
	ctx, cancel := withTimeout()
	defer cancel()
	selector := fmt.Sprintf("spec.driver=%s,spec.nodeName=%s", a.driverName, node)
	list, err := a.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PublishPool makes `slices` the node's slices, owned by its Node: create or replace each, then delete the others.
//
// A slice that already says what it should (spec and owner) is not written again, so its resourceVersion stays.
// Deleting only after every new slice is written keeps the pool complete at its highest generation as soon as the
// last write lands; slices left over are at a lower generation, which consumers ignore until they are gone.
// `deleteFirst` (republish-leaves-incomplete-pool) deletes every slice of the node before writing, so the pool is
// gone in between.
func (a *DriverAPI) PublishPool(node string, slices []resourceapi.ResourceSlice, deleteFirst bool) error {
	if deleteFirst {
		if err := a.DeletePool(node); err != nil {
			return err
		}
	}
	owner, err := a.nodeOwner(node)
	if err != nil {
		return err
	}
	listed, err := a.ListSlices(node)
	if err != nil {
		return err
	}
	existing := map[string]resourceapi.ResourceSlice{}
	for _, item := range listed {
		existing[item.Name] = item
	}
	writes := make(chan resourceapi.ResourceSlice)
	failures := make(chan error, len(slices))
	var wg sync.WaitGroup
	for range min(len(slices), publishWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for slice := range writes {
				failures <- a.writeSlice(slice, existing)
			}
		}()
	}
	for _, slice := range slices {
		if owner != nil {
			slice.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		writes <- slice
	}
	close(writes)
	wg.Wait()
	close(failures)
	for failure := range failures {
		if failure != nil {
			return failure
		}
	}
	for name := range existing {
		if !containsSlice(slices, name) {
			if err := a.DeleteSlice(name); err != nil {
				return err
			}
		}
	}
	return nil
}

func containsSlice(slices []resourceapi.ResourceSlice, name string) bool {
	for _, slice := range slices {
		if slice.Name == name {
			return true
		}
	}
	return false
}

func (a *DriverAPI) writeSlice(slice resourceapi.ResourceSlice, existing map[string]resourceapi.ResourceSlice) error {
	ctx, cancel := withTimeout()
	defer cancel()
	slices := a.client.ResourceV1().ResourceSlices()
	current, found := existing[slice.Name]
	if !found {
		_, err := slices.Create(ctx, &slice, metav1.CreateOptions{})
		return err
	}
	slice = withServerTaintTimes(slice, current)
	if sameSlice(current, slice) {
		return nil // unchanged: an update would only churn its resourceVersion
	}
	slice.ResourceVersion = current.ResourceVersion
	_, err := slices.Update(ctx, &slice, metav1.UpdateOptions{})
	return err
}

// withServerTaintTimes is `desired` with each taint that has no TimeAdded given the one of the same taint (key,
// value, effect) of the same device in `current`: the API server sets TimeAdded on a taint written without one
// (k8s.io/kubernetes v1.37.2 pkg/apis/resource/v1/defaults.go, SetDefaults_DeviceTaint), so an unchanged taint
// keeps its time and does not read as a change.
func withServerTaintTimes(desired, current resourceapi.ResourceSlice) resourceapi.ResourceSlice {
	before := map[string][]resourceapi.DeviceTaint{}
	for _, device := range current.Spec.Devices {
		before[device.Name] = device.Taints
	}
	out := *desired.DeepCopy()
	for i := range out.Spec.Devices {
		for j := range out.Spec.Devices[i].Taints {
			taint := &out.Spec.Devices[i].Taints[j]
			for _, was := range before[out.Spec.Devices[i].Name] {
				if taint.TimeAdded == nil && was.Key == taint.Key && was.Value == taint.Value && was.Effect == taint.Effect {
					taint.TimeAdded = was.TimeAdded
				}
			}
		}
	}
	return out
}

// sameSlice: `current` already says what `desired` does (its spec and its owner), taint times taken as in
// withServerTaintTimes.
func sameSlice(current, desired resourceapi.ResourceSlice) bool {
	desired = withServerTaintTimes(desired, current)
	return apiequality.Semantic.DeepEqual(current.Spec, desired.Spec) &&
		apiequality.Semantic.DeepEqual(current.OwnerReferences, desired.OwnerReferences)
}

// samePool: the pool's slices at their highest generation in `existing` are those of `desired` (by name), each
// with the spec it says, and no others. Owners are not compared: `desired` carries none before it is published.
func samePool(existing, desired []resourceapi.ResourceSlice) bool {
	var generation int64
	for _, item := range existing {
		generation = max(generation, item.Spec.Pool.Generation)
	}
	current := map[string]resourceapi.ResourceSlice{}
	for _, item := range existing {
		if item.Spec.Pool.Generation == generation {
			current[item.Name] = item
		}
	}
	if len(current) != len(desired) {
		return false
	}
	for _, slice := range desired {
		was, found := current[slice.Name]
		if !found || !apiequality.Semantic.DeepEqual(was.Spec, withServerTaintTimes(slice, was).Spec) {
			return false
		}
	}
	return true
}

// nodeOwner is the owner reference the node's slices carry (nil when no such Node exists), as the upstream
// kubeletplugin helper names the Node, so that garbage collection removes the slices with the Node.
func (a *DriverAPI) nodeOwner(node string) (*metav1.OwnerReference, error) {
	if owner, ok := a.nodeOwners.Load(node); ok {
		return owner.(*metav1.OwnerReference), nil
	}
	ctx, cancel := withTimeout()
	defer cancel()
	var owner *metav1.OwnerReference
	found, err := a.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: found.UID, Controller: ptr.To(true)}
	}
	a.nodeOwners.Store(node, owner)
	return owner, nil
}

// DeletePool deletes every slice of this driver on `node`, one by one (the RBAC grants delete, not
// deletecollection).
func (a *DriverAPI) DeletePool(node string) error {
	listed, err := a.ListSlices(node)
	if err != nil {
		return err
	}
	for _, item := range listed {
		if err := a.DeleteSlice(item.Name); err != nil {
			return err
		}
	}
	return nil
}

// DeleteSlice deletes one slice; already gone is fine.
func (a *DriverAPI) DeleteSlice(name string) error {
	ctx, cancel := withTimeout()
	defer cancel()
	err := a.client.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
