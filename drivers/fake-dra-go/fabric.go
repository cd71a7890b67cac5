package main

// The `gpu-fabric` device profile: fabric-attached GPUs that the scheduler binds a
// pod to only once attached. Each device carries a binding condition (`attached`), a failure condition
// (`attach-failed`) and bindsToNode. The attach controller, under an identity of its own (--controller-kubeconfig),
// watches claims allocated such devices of this driver, "attaches" each (waits --attach-delay), and only then writes
// attached=True into the claim's status.devices entry, or attach-failed=True under the attach-failure fault.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
)

const (
	fabricBindingCondition = "attached"
	fabricFailureCondition = "attach-failed"
	attachFailureFault     = "attach-failure"
	attachedOutcome        = "attached"
	failedOutcome          = "failed"
	// watchPeriod: a watch is reopened after this long (the API server ends long watches anyway), so a lost
	// connection heals.
	watchPeriod = 60 * time.Second
	// watchRetryPause: pause before reopening a watch that failed (API server restarting), so the controller does
	// not loop tightly against a dead server.
	watchRetryPause = 1 * time.Second
	// conditionTimeLayout: a condition's lastTransitionTime in whole seconds, as the Python build writes it (and as
	// metav1.Time is serialized).
	conditionTimeLayout = "2006-01-02T15:04:05Z"
)

// fabricDevice is device `index` of the node: the gpu profile's model, index, uuid and driverVersion (without the
// other profiles' release or words-format additions, as in the Python build), on a fabric, usable only once attached.
func fabricDevice(c Config, index int) resourceapi.Device {
	return resourceapi.Device{
		Name: fmt.Sprintf("%s-%d", fabricProfile, index),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model":         {StringValue: ptr.To("FakeGPU-9000")},
			"index":         {IntValue: ptr.To(int64(index))},
			"uuid":          {StringValue: ptr.To(fmt.Sprintf("%s-%s-%d", fabricProfile, c.NodeName, index))},
			"driverVersion": {VersionValue: ptr.To(c.DriverVersion)},
			"fabric":        {StringValue: ptr.To("fake-fabric")},
		},
		Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("16Gi")}},
		BindsToNode:              ptr.To(true),
		BindingConditions:        []string{fabricBindingCondition},
		BindingFailureConditions: []string{fabricFailureCondition},
	}
}

// Attachment is one attach of a device for a claim's allocation, as the controller did it.
type Attachment struct {
	Claim, Namespace, Name, Device string
	Outcome                        string // attachedOutcome, or failedOutcome under the attach-failure fault
	StartedAt                      time.Time
	FinishedAt                     time.Time // the attach step itself finished: the device is usable from then on
	ConditionWrittenAt             time.Time // zero when the API server refused the write
}

func (a Attachment) json() map[string]any {
	written := 0.0
	if !a.ConditionWrittenAt.IsZero() {
		written = unixSeconds(a.ConditionWrittenAt)
	}
	return map[string]any{
		"claim":              a.Claim,
		"namespace":          a.Namespace,
		"name":               a.Name,
		"device":             a.Device,
		"outcome":            a.Outcome,
		"startedAt":          unixSeconds(a.StartedAt),
		"finishedAt":         unixSeconds(a.FinishedAt),
		"conditionWrittenAt": written,
	}
}

// AttachLog records every attach of the controller, for the control socket's GET /attachments. Safe for concurrent
// use.
type AttachLog struct {
	mu          sync.Mutex
	attachments []Attachment
}

func newAttachLog() *AttachLog { return &AttachLog{} }

// Record adds one attach.
func (l *AttachLog) Record(attachment Attachment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attachments = append(l.attachments, attachment)
}

// JSON is every attach, oldest first, as the Python build's AttachLog.to_json gives it (times in Unix seconds).
func (l *AttachLog) JSON() []map[string]any {
	l.mu.Lock()
	attachments := slices.Clone(l.attachments)
	l.mu.Unlock()
	entries := make([]map[string]any, 0, len(attachments))
	for _, attachment := range attachments {
		entries = append(entries, attachment.json())
	}
	return entries
}

// deviceKey names an allocated device as status.devices entries are matched to allocation results.
type deviceKey struct{ driver, pool, device string }

// pendingDevices are the claim's allocation results of `driver` with binding conditions whose status.devices entry
// has neither a binding nor a failure condition (of any status): the devices still to attach. An entry with one was
// handled; a later allocation starts with no entries (the scheduler clears status.devices when it deallocates).
func pendingDevices(claim *resourceapi.ResourceClaim, driver string) []resourceapi.DeviceRequestAllocationResult {
	allocation := claim.Status.Allocation
	if allocation == nil {
		return nil
	}
	written := map[deviceKey][]metav1.Condition{}
	for _, entry := range claim.Status.Devices {
		written[deviceKey{entry.Driver, entry.Pool, entry.Device}] = entry.Conditions
	}
	var pending []resourceapi.DeviceRequestAllocationResult
	for _, result := range allocation.Devices.Results {
		if result.Driver != driver || len(result.BindingConditions) == 0 {
			continue
		}
		conditions := written[deviceKey{driver, result.Pool, result.Device}]
		if !hasConditionOf(conditions, result.BindingConditions) && !hasConditionOf(conditions, result.BindingFailureConditions) {
			pending = append(pending, result)
		}
	}
	return pending
}

func hasConditionOf(conditions []metav1.Condition, kinds []string) bool {
	for _, condition := range conditions {
		if slices.Contains(kinds, condition.Type) {
			return true
		}
	}
	return false
}

// allocationStamp identifies the claim's current allocation: its timestamp, else the claim's resourceVersion.
func allocationStamp(claim *resourceapi.ResourceClaim) string {
	if allocation := claim.Status.Allocation; allocation != nil && allocation.AllocationTimestamp != nil {
		return allocation.AllocationTimestamp.UTC().Format(time.RFC3339)
	}
	return claim.ResourceVersion
}

// attachLedger remembers, per claim and device, the allocation an attach was started for, so that an allocation is
// attached once although its claim changes several times before the condition lands.
type attachLedger struct {
	mu      sync.Mutex
	started map[types.UID]map[string]string // claim UID -> device -> allocation stamp
}

func newAttachLedger() *attachLedger {
	return &attachLedger{started: map[types.UID]map[string]string{}}
}

// toStart returns the claim's pending devices with no attach started for its current allocation, and marks them
// started. A deallocated claim is forgotten, so that a later allocation is attached anew even within the same second
// (allocation timestamps have whole seconds).
func (l *attachLedger) toStart(claim *resourceapi.ResourceClaim, driver string) []resourceapi.DeviceRequestAllocationResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if claim.Status.Allocation == nil {
		delete(l.started, claim.UID)
		return nil
	}
	stamp := allocationStamp(claim)
	var fresh []resourceapi.DeviceRequestAllocationResult
	for _, result := range pendingDevices(claim, driver) {
		devices := l.started[claim.UID]
		if devices == nil {
			devices = map[string]string{}
			l.started[claim.UID] = devices
		}
		if devices[result.Device] == stamp {
			continue
		}
		devices[result.Device] = stamp
		fresh = append(fresh, result)
	}
	return fresh
}

// attachCondition is a condition of a status.devices entry, its fields in the Python build's order.
type attachCondition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	LastTransitionTime string `json:"lastTransitionTime"`
}

func trueCondition(kind, reason, message string, now time.Time) attachCondition {
	return attachCondition{
		Type: kind, Status: string(metav1.ConditionTrue), Reason: reason, Message: message,
		LastTransitionTime: now.UTC().Format(conditionTimeLayout),
	}
}

func attachedCondition(now time.Time) attachCondition {
	return trueCondition(fabricBindingCondition, "Attached", "attached to the node", now)
}

func attachFailedCondition(fault Fault, now time.Time) attachCondition {
	return trueCondition(fabricFailureCondition, "AttachFailed", "attach failed (injected): "+fault.Message, now)
}

// deviceStatusEntry is one status.devices entry the controller writes.
type deviceStatusEntry struct {
	Driver     string            `json:"driver"`
	Pool       string            `json:"pool"`
	Device     string            `json:"device"`
	Conditions []attachCondition `json:"conditions"`
}

func conditionEntry(result resourceapi.DeviceRequestAllocationResult, condition attachCondition) deviceStatusEntry {
	return deviceStatusEntry{Driver: result.Driver, Pool: result.Pool, Device: result.Device, Conditions: []attachCondition{condition}}
}

// claimStatusWrites is what the controller wrote into one claim's status.devices for its current allocation, in
// the order first written. Its lock keeps the claim's applies in order.
type claimStatusWrites struct {
	mu         sync.Mutex
	allocation string
	entries    []deviceStatusEntry
}

// with records `entry` for `allocation`, replacing an earlier one of its device, and returns every entry written
// for that allocation: the entries of an earlier allocation went with it.
func (w *claimStatusWrites) with(allocation string, entry deviceStatusEntry) []deviceStatusEntry {
	if w.allocation != allocation {
		w.allocation, w.entries = allocation, nil
	}
	index := slices.IndexFunc(w.entries, func(e deviceStatusEntry) bool { return e.Pool == entry.Pool && e.Device == entry.Device })
	if index < 0 {
		w.entries = append(w.entries, entry)
	} else {
		w.entries[index] = entry
	}
	return slices.Clone(w.entries)
}

// statusWrites holds every claim's claimStatusWrites.
//
// A server-side apply states every field its manager owns: one that named only this device would take the
// manager's other entries of the claim away (the API server deletes them). So each apply carries every entry the
// controller wrote for the claim's current allocation, and applies of one claim go one at a time, so that an older,
// shorter one cannot land last.
type statusWrites struct {
	mu     sync.Mutex
	claims map[types.UID]*claimStatusWrites
}

func newStatusWrites() *statusWrites {
	return &statusWrites{claims: map[types.UID]*claimStatusWrites{}}
}

// write adds `entry` to the claim's entries for `allocation` and applies them all with `apply`, one apply of the
// claim at a time; it returns what `apply` returns.
func (s *statusWrites) write(claim types.UID, allocation string, entry deviceStatusEntry, apply func([]deviceStatusEntry) time.Time) time.Time {
	s.mu.Lock()
	writes := s.claims[claim]
	if writes == nil {
		writes = &claimStatusWrites{}
		s.claims[claim] = writes
	}
	s.mu.Unlock()
	writes.mu.Lock()
	defer writes.mu.Unlock()
	return apply(writes.with(allocation, entry))
}

// deviceStatusApply is the server-side apply body of the claim's status.devices `entries`; the UID makes it a
// precondition on the exact claim observed.
func deviceStatusApply(claim *resourceapi.ResourceClaim, entries []deviceStatusEntry) ([]byte, error) {
	return json.Marshal(map[string]any{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "ResourceClaim",
		"metadata":   map[string]any{"name": claim.Name, "namespace": claim.Namespace, "uid": claim.UID},
		"status":     map[string]any{"devices": entries},
	})
}

// attachController attaches this driver's devices with binding conditions, one goroutine per attach.
type attachController struct {
	config       Config
	client       kubernetes.Interface
	fieldManager string
	faults       *FaultSet
	log          *AttachLog
	ledger       *attachLedger
	writes       *statusWrites
	stop         <-chan struct{}
	ctx          context.Context // cancelled once stop is closed: ends the watch in flight
	attaches     sync.WaitGroup  // attaches in flight
}

// startAttachController starts the gpu-fabric attach controller under its own identity (`c.ControllerKubeconfig`):
// it watches claims allocated devices of this driver with binding conditions, attaches them (`c.AttachDelay`) and
// writes the binding condition, or the failure condition under the attach-failure fault, recording each attach in
// `log`, until `stop` is closed. An error only if it cannot start.
func startAttachController(c Config, faults *FaultSet, log *AttachLog, stop <-chan struct{}) error {
	client, err := newControllerClient(c)
	if err != nil {
		return err
	}
	go newAttachController(c, client, faults, log, stop).run()
	return nil
}

// newControllerClient connects as the controller's identity. It is not rate limited, as the Python build's is not:
// a burst of claims must not queue behind client-go's default 5 requests per second.
func newControllerClient(c Config) (kubernetes.Interface, error) {
	config, err := clientcmd.BuildConfigFromFlags("", c.ControllerKubeconfig)
	if err != nil {
		return nil, err
	}
	config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	config.UserAgent = "fake-dra-go/" + c.DriverVersion + " attach-controller"
	return kubernetes.NewForConfig(config)
}

func newAttachController(c Config, client kubernetes.Interface, faults *FaultSet, log *AttachLog, stop <-chan struct{}) *attachController {
	return &attachController{
		config: c, client: client, fieldManager: c.DriverName + "/attach-controller", faults: faults, log: log,
		ledger: newAttachLedger(), writes: newStatusWrites(), stop: stop, ctx: contextUntil(stop),
	}
}

func contextUntil(stop <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	return ctx
}

func (a *attachController) stopping() bool {
	select {
	case <-a.stop:
		return true
	default:
		return false
	}
}

// sleep waits `d`; false if the controller is stopping first.
func (a *attachController) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-a.stop:
		return false
	}
}

// run lists and watches claims until stop; a controller outlives any one failed list or watch.
func (a *attachController) run() {
	for !a.stopping() {
		if err := a.watchOnce(); err != nil && !a.stopping() {
			fmt.Printf("fake-dra attach controller: watch claims: %s\n", denial(err))
			a.sleep(watchRetryPause)
		}
	}
}

// watchOnce observes every claim of every namespace, then their changes until the watch ends (watchPeriod).
func (a *attachController) watchOnce() error {
	claims := a.client.ResourceV1().ResourceClaims(metav1.NamespaceAll)
	listContext, cancelList := context.WithTimeout(a.ctx, requestTimeout)
	listed, err := claims.List(listContext, metav1.ListOptions{})
	cancelList()
	if err != nil {
		return err
	}
	for i := range listed.Items {
		a.observe(&listed.Items[i])
	}
	watchContext, cancelWatch := context.WithTimeout(a.ctx, watchPeriod+requestTimeout)
	defer cancelWatch()
	watcher, err := claims.Watch(watchContext, metav1.ListOptions{
		ResourceVersion: listed.ResourceVersion,
		TimeoutSeconds:  ptr.To(int64(watchPeriod / time.Second)),
	})
	if err != nil {
		return err
	}
	defer watcher.Stop()
	// An ERROR event (e.g. the resourceVersion expired) is followed by the end of the watch, and a new list.
	for event := range watcher.ResultChan() {
		claim, ok := event.Object.(*resourceapi.ResourceClaim)
		if ok && (event.Type == watch.Added || event.Type == watch.Modified) {
			a.observe(claim)
		}
	}
	return nil
}

// observe starts an attach for every device of the claim still waiting for one.
func (a *attachController) observe(claim *resourceapi.ResourceClaim) {
	for _, result := range a.ledger.toStart(claim, a.config.DriverName) {
		a.attaches.Go(func() { a.attach(claim, result) })
	}
}

// attach "attaches" one device (the fabric takes AttachDelay), then writes its condition and records the attach.
func (a *attachController) attach(claim *resourceapi.ResourceClaim, result resourceapi.DeviceRequestAllocationResult) {
	started := time.Now()
	failure, failed := a.faults.Find(attachFailureFault, string(claim.UID), []string{result.Device})
	early := a.config.IsBroken(bindingConditionsBeforeAttach) && !failed
	var written time.Time
	if early { // the bug: the device is announced attached before the attach step ran
		written = a.write(claim, result, attachedCondition(started))
	}
	if !a.sleep(a.config.AttachDelay) {
		return // stopping: an unfinished attach writes nothing
	}
	finished := time.Now()
	outcome := attachedOutcome
	switch {
	case failed:
		outcome = failedOutcome
		written = a.write(claim, result, attachFailedCondition(failure, finished))
	case !early:
		written = a.write(claim, result, attachedCondition(finished))
	}
	a.log.Record(Attachment{
		Claim: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, Device: result.Device,
		Outcome: outcome, StartedAt: started, FinishedAt: finished, ConditionWrittenAt: written,
	})
}

// write applies the device's condition with every other entry written for the claim's allocation; when it landed
// (zero if refused).
func (a *attachController) write(claim *resourceapi.ResourceClaim, result resourceapi.DeviceRequestAllocationResult, condition attachCondition) time.Time {
	return a.writes.write(claim.UID, allocationStamp(claim), conditionEntry(result, condition), func(entries []deviceStatusEntry) time.Time {
		return a.apply(claim, entries, condition.Type)
	})
}

// apply server-side applies the claim's status.devices `entries` under the controller's field manager, forcing
// ownership; when it landed, or zero if refused (a claim deallocated or deleted meanwhile: nothing left to attach
// for).
func (a *attachController) apply(claim *resourceapi.ResourceClaim, entries []deviceStatusEntry, what string) time.Time {
	body, err := deviceStatusApply(claim, entries)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		options := metav1.PatchOptions{FieldManager: a.fieldManager, Force: ptr.To(true)}
		_, err = a.client.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.ApplyPatchType, body, options, "status")
	}
	if err != nil {
		fmt.Printf("fake-dra attach controller: write %s for %s: %s\n", what, claim.Name, statusCode(err))
		return time.Time{}
	}
	return time.Now()
}

// statusCode is the HTTP status of a refused request, as the Python build logs it; the error itself otherwise.
func statusCode(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		return strconv.Itoa(int(status.Status().Code))
	}
	return err.Error()
}
