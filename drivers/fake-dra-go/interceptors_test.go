package main

import (
	"context"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"
)

// servedCore is a driver core for node n1 on a fake API server, served by startGRPC's servers (their interceptors
// included) on sockets in a short temporary directory.
type servedCore struct {
	core         *DriverCore
	applied      *patches
	dra          drav1.DRAPluginClient
	draV1beta1   drav1beta1.DRAPluginClient
	registration registration.RegistrationClient
}

func serveCore(t *testing.T, configure func(*Config), claims ...*resourceapi.ResourceClaim) *servedCore {
	t.Helper()
	sockets, err := os.MkdirTemp("", "fdi") // unix socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockets) })
	applied := &patches{}
	core := testCore(t, t.TempDir(), func(c *Config) {
		c.KubeletRoot, c.HealthServices = sockets, []string{"v1"}
		if configure != nil {
			configure(c)
		}
	}, applied, claims...)
	servers, err := startGRPC(core)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, server := range servers {
			server.Stop()
		}
	})
	dial := func(path string) *grpc.ClientConn {
		conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	dra := dial(core.config.DRASocket())
	return &servedCore{
		core: core, applied: applied, dra: drav1.NewDRAPluginClient(dra), draV1beta1: drav1beta1.NewDRAPluginClient(dra),
		registration: registration.NewRegistrationClient(dial(core.config.RegistrationSocket())),
	}
}

func v1Claims(claims ...*resourceapi.ResourceClaim) []*drav1.Claim {
	refs := make([]*drav1.Claim, len(claims))
	for i, claim := range claims {
		refs[i] = &drav1.Claim{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}
	}
	return refs
}

func (s *servedCore) prepare(t *testing.T, claims ...*resourceapi.ResourceClaim) map[string]*drav1.NodePrepareResourceResponse {
	t.Helper()
	response, err := s.dra.NodePrepareResources(context.Background(), &drav1.NodePrepareResourcesRequest{Claims: v1Claims(claims...)})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	return response.Claims
}

func (s *servedCore) unprepare(t *testing.T, claims ...*resourceapi.ResourceClaim) map[string]*drav1.NodeUnprepareResourceResponse {
	t.Helper()
	response, err := s.dra.NodeUnprepareResources(context.Background(), &drav1.NodeUnprepareResourcesRequest{Claims: v1Claims(claims...)})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return response.Claims
}

func (s *servedCore) isPrepared(t *testing.T, uid string) bool {
	t.Helper()
	_, ok, err := s.core.prepared.Get(uid)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// lastCall is the call log's last record of `method`.
func (s *servedCore) lastCall(t *testing.T, method string) map[string]any {
	t.Helper()
	calls := s.core.calls.Calls()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i]["method"] == method {
			return calls[i]
		}
	}
	t.Fatalf("no %s in the call log: %v", method, calls)
	return nil
}

func (s *servedCore) callsOf(method string) int {
	count := 0
	for _, call := range s.core.calls.Calls() {
		if call["method"] == method {
			count++
		}
	}
	return count
}

func faultOn(mode, claim, message string) Fault {
	fault := Fault{Mode: mode, Message: message}
	if claim != "" {
		fault.Claim = ptr.To(claim)
	}
	return fault
}

func threeClaims(t *testing.T) (a, b, c *resourceapi.ResourceClaim) {
	return heldClaim(t, "a", "uid-a", allocated("gpu-0")), heldClaim(t, "b", "uid-b", allocated("gpu-1")),
		heldClaim(t, "c", "uid-c", allocated("gpu-2"))
}

func TestPrepareErrorForOneClaimAnswersThatClaimAndPreparesTheOthersInOneLoggedCall(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.core.faults.Replace([]Fault{faultOn("prepare-error", "uid-a", "boom")})
	answers := s.prepare(t, a, b)
	if got := answers["uid-a"]; got.Error != "prepare failed (injected): boom" || len(got.Devices) != 0 {
		t.Errorf("faulted claim answered %v", got)
	}
	if got := answers["uid-b"]; got.Error != "" || len(got.Devices) != 1 || got.Devices[0].DeviceName != "gpu-1" {
		t.Errorf("the other claim answered %v", got)
	}
	if s.isPrepared(t, "uid-a") || !s.isPrepared(t, "uid-b") {
		t.Errorf("prepared: a %v, b %v; want only b", s.isPrepared(t, "uid-a"), s.isPrepared(t, "uid-b"))
	}
	if _, err := os.Stat(cdiSpecPath(s.core.config, "uid-a")); !os.IsNotExist(err) {
		t.Errorf("the faulted claim has a CDI spec (%v)", err)
	}
	if n := s.callsOf("NodePrepareResources"); n != 1 {
		t.Errorf("%d NodePrepareResources records, want 1 for the one call", n)
	}
	call := s.lastCall(t, "NodePrepareResources")
	want := map[string]any{
		"claims": []string{"uid-a", "uid-b"}, "outcome": "error (1 of 2 claims)",
		"errors": map[string]string{"uid-a": "prepare failed (injected): boom"}, "node": "n1",
	}
	for key, value := range want {
		if !reflect.DeepEqual(call[key], value) {
			t.Errorf("call log %s: %#v, want %#v", key, call[key], value)
		}
	}
	s.core.faults.Replace(nil) // recovery
	if got := s.prepare(t, a)["uid-a"]; got.Error != "" || len(got.Devices) != 1 {
		t.Errorf("prepare after the fault was cleared: %v", got)
	}
	if call := s.lastCall(t, "NodePrepareResources"); call["outcome"] != "ok" || !reflect.DeepEqual(call["errors"], map[string]string{}) {
		t.Errorf("an unfaulted call's record: %v", call)
	}
}

func TestPrepareErrorOfAnAlreadyPreparedClaimAnswersTheError(t *testing.T) {
	a, _, _ := threeClaims(t)
	s := serveCore(t, nil, a)
	s.prepare(t, a)
	s.core.faults.Replace([]Fault{faultOn("prepare-error", "", defaultFaultMessage)})
	if got := s.prepare(t, a)["uid-a"]; got.Error != "prepare failed (injected): injected fault" {
		t.Errorf("repeated prepare under prepare-error: %v", got)
	}
	if !s.isPrepared(t, "uid-a") {
		t.Error("the fault undid the earlier prepare")
	}
}

func TestPrepareErrorActsOnV1beta1CallsToo(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.core.faults.Replace([]Fault{faultOn("prepare-error", "uid-b", "boom")})
	claims := []*drav1beta1.Claim{{Namespace: "ns", Name: "a", Uid: "uid-a"}, {Namespace: "ns", Name: "b", Uid: "uid-b"}}
	response, err := s.draV1beta1.NodePrepareResources(context.Background(), &drav1beta1.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if got := response.Claims["uid-a"]; got.Error != "" || len(got.Devices) != 1 {
		t.Errorf("a: %v", got)
	}
	if got := response.Claims["uid-b"]; got.Error != "prepare failed (injected): boom" {
		t.Errorf("b: %v", got)
	}
	s.core.faults.Replace([]Fault{faultOn("unprepare-error", "uid-a", "stuck")})
	unprepared, err := s.draV1beta1.NodeUnprepareResources(context.Background(), &drav1beta1.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if unprepared.Claims["uid-a"].Error != "unprepare failed (injected): stuck" || unprepared.Claims["uid-b"].Error != "" {
		t.Errorf("unprepare answers: %v", unprepared.Claims)
	}
}

func TestUnprepareErrorForOneClaimLeavesItPreparedAndUnpreparesTheOthers(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.prepare(t, a, b)
	s.core.faults.Replace([]Fault{faultOn("unprepare-error", "uid-a", defaultFaultMessage)})
	answers := s.unprepare(t, a, b)
	if answers["uid-a"].Error != "unprepare failed (injected): injected fault" || answers["uid-b"].Error != "" {
		t.Errorf("answers: %v", answers)
	}
	if !s.isPrepared(t, "uid-a") || s.isPrepared(t, "uid-b") {
		t.Errorf("prepared after the unprepare: a %v, b %v; want only a", s.isPrepared(t, "uid-a"), s.isPrepared(t, "uid-b"))
	}
	call := s.lastCall(t, "NodeUnprepareResources")
	if call["outcome"] != "error (1 of 2 claims)" || !reflect.DeepEqual(call["claims"], []string{"uid-a", "uid-b"}) {
		t.Errorf("call log: %v", call)
	}
	s.core.faults.Replace(nil)
	if got := s.unprepare(t, a)["uid-a"]; got.Error != "" || s.isPrepared(t, "uid-a") {
		t.Errorf("the retry: %v", got)
	}
}

func TestSlowPrepareDelaysTheCallByTheDelayOfEachFaultedClaim(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.core.faults.Replace([]Fault{{Mode: "slow-prepare", Claim: ptr.To("uid-a"), Delay: 0.3, Message: defaultFaultMessage}})
	began := time.Now()
	answers := s.prepare(t, a, b)
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("the call took %v, less than the delay", took)
	}
	if answers["uid-a"].Error != "" || answers["uid-b"].Error != "" {
		t.Errorf("a slow prepare still prepares: %v", answers)
	}
	if latency := s.lastCall(t, "NodePrepareResources")["latency"].(float64); latency < 0.3 {
		t.Errorf("logged latency %g s, less than the delay", latency)
	}
	s.core.faults.Replace([]Fault{{Mode: "slow-unprepare", Delay: 0.2, Message: defaultFaultMessage}})
	began = time.Now()
	s.unprepare(t, a, b)
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Errorf("unprepare of two claims took %v; each waits 0.2 s, one after the other", took)
	}
}

// handedOn is a fake service behind claimFaults: it records each request it is handed and answers every claim.
type handedOn struct {
	mu       sync.Mutex
	requests [][]string
	at       []time.Time
}

func (h *handedOn) handle(_ context.Context, request any) (any, error) {
	claims := request.(*drav1.NodePrepareResourcesRequest).Claims
	uids := make([]string, len(claims))
	response := &drav1.NodePrepareResourcesResponse{Claims: map[string]*drav1.NodePrepareResourceResponse{}}
	for i, claim := range claims {
		uids[i] = claim.Uid
		response.Claims[claim.Uid] = &drav1.NodePrepareResourceResponse{Devices: []*drav1.Device{{DeviceName: "for-" + claim.Uid}}}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, uids)
	h.at = append(h.at, time.Now())
	return response, nil
}

func prepareRequest(uids ...string) *drav1.NodePrepareResourcesRequest {
	request := &drav1.NodePrepareResourcesRequest{}
	for _, uid := range uids {
		request.Claims = append(request.Claims, &drav1.Claim{Namespace: "ns", Name: strings.TrimPrefix(uid, "uid-"), Uid: uid})
	}
	return request
}

func TestACallNoFaultAppliesToIsHandedOnWholeAndUntouched(t *testing.T) {
	s := serveCore(t, nil)
	s.core.faults.Replace([]Fault{faultOn("prepare-error", "uid-other", "x"), faultOn("unprepare-error", "", "x")})
	request := prepareRequest("uid-a", "uid-b")
	var handed any
	_, err := claimFaults(s.core)(context.Background(), request, &grpc.UnaryServerInfo{}, func(_ context.Context, r any) (any, error) {
		handed = r
		return &drav1.NodePrepareResourcesResponse{}, nil
	})
	if err != nil || handed != request {
		t.Errorf("handed on %v (error %v), want the request itself", handed, err)
	}
}

func TestFaultedClaimsSplitTheCallInRequestOrderAndTheAnswersAreMerged(t *testing.T) {
	s := serveCore(t, nil)
	s.core.faults.Replace([]Fault{
		{Mode: "slow-prepare", Claim: ptr.To("uid-b"), Delay: 0.2, Message: defaultFaultMessage},
		faultOn("prepare-error", "uid-d", "boom"),
	})
	service := &handedOn{}
	began := time.Now()
	response, err := claimFaults(s.core)(context.Background(), prepareRequest("uid-a", "uid-b", "uid-c", "uid-d", "uid-e"),
		&grpc.UnaryServerInfo{}, service.handle)
	if err != nil {
		t.Fatal(err)
	}
	// a before b's delay; b, after it, with c; d answered by its fault; e after it.
	if want := [][]string{{"uid-a"}, {"uid-b", "uid-c"}, {"uid-e"}}; !reflect.DeepEqual(service.requests, want) {
		t.Errorf("handed on %v, want %v", service.requests, want)
	}
	if len(service.at) == 3 && (service.at[0].Sub(began) > 150*time.Millisecond || service.at[1].Sub(began) < 200*time.Millisecond) {
		t.Errorf("handed on at %v and %v after the call began; b's delay (0.2 s) comes between", service.at[0].Sub(began), service.at[1].Sub(began))
	}
	answers := response.(*drav1.NodePrepareResourcesResponse).Claims
	for _, uid := range []string{"uid-a", "uid-b", "uid-c", "uid-e"} {
		if answers[uid].Error != "" || answers[uid].Devices[0].DeviceName != "for-"+uid {
			t.Errorf("%s: %v", uid, answers[uid])
		}
	}
	if answers["uid-d"].Error != "prepare failed (injected): boom" || len(answers) != 5 {
		t.Errorf("answers %v", answers)
	}
}

func TestHangPrepareBlocksItsClaimUntilClearedAndThenPreparesIt(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.core.faults.Replace([]Fault{faultOn("hang-prepare", "uid-a", defaultFaultMessage)})
	// b comes first: it is prepared before a hangs, as the core prepares claims one after the other.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := s.dra.NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{Claims: v1Claims(b, a)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a hung prepare answered %v, want the caller's deadline", err)
	}
	if !s.isPrepared(t, "uid-b") || s.isPrepared(t, "uid-a") {
		t.Errorf("during the hang: b prepared %v, a prepared %v", s.isPrepared(t, "uid-b"), s.isPrepared(t, "uid-a"))
	}
	if n := s.callsOf("NodePrepareResources"); n != 0 {
		t.Errorf("the hung call is logged before it ends (%d records)", n)
	}
	s.core.faults.Replace(nil) // the hang ends; the call goes on, its caller gone
	deadline := time.Now().Add(5 * time.Second)
	for !s.isPrepared(t, "uid-a") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !s.isPrepared(t, "uid-a") {
		t.Fatal("the hung claim was not prepared once the fault was cleared")
	}
	for s.callsOf("NodePrepareResources") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if call := s.lastCall(t, "NodePrepareResources"); call["outcome"] != "ok" || !reflect.DeepEqual(call["claims"], []string{"uid-b", "uid-a"}) {
		t.Errorf("call log: %v", call)
	}
}

func TestHangUnprepareHoldsUpTheClaimsAfterIt(t *testing.T) {
	a, b, _ := threeClaims(t)
	s := serveCore(t, nil, a, b)
	s.prepare(t, a, b)
	s.core.faults.Replace([]Fault{faultOn("hang-unprepare", "uid-a", defaultFaultMessage)})
	done := make(chan *drav1.NodeUnprepareResourcesResponse, 1)
	go func() {
		response, _ := s.dra.NodeUnprepareResources(context.Background(), &drav1.NodeUnprepareResourcesRequest{Claims: v1Claims(a, b)})
		done <- response
	}()
	select {
	case response := <-done:
		t.Fatalf("a hung unprepare answered %v", response)
	case <-time.After(200 * time.Millisecond):
	}
	if !s.isPrepared(t, "uid-a") || !s.isPrepared(t, "uid-b") {
		t.Error("claims were unprepared during the hang of the first")
	}
	s.core.faults.Replace(nil)
	if response := <-done; response == nil || response.Claims["uid-a"].Error != "" || response.Claims["uid-b"].Error != "" {
		t.Errorf("after the hang: %v", response)
	}
	if s.isPrepared(t, "uid-a") || s.isPrepared(t, "uid-b") {
		t.Error("claims still prepared after the hang ended")
	}
}

func TestAWholeCallRefusalComesBeforeAnyFault(t *testing.T) {
	a, _, _ := threeClaims(t)
	s := serveCore(t, func(c *Config) { c.WholeCallRefusal = true }, a)
	s.core.faults.Replace([]Fault{{Mode: "slow-prepare", Delay: 5, Message: defaultFaultMessage}, faultOn("prepare-error", "uid-a", "boom")})
	claims := append(v1Claims(a), &drav1.Claim{Namespace: "ns", Name: "missing", Uid: "uid-missing"})
	began := time.Now()
	_, err := s.dra.NodePrepareResources(context.Background(), &drav1.NodePrepareResourcesRequest{Claims: claims})
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "prepare refused: get claim ns/missing") {
		t.Errorf("answer %v, want a whole-call refusal (Unknown)", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the refusal took %v: a fault delayed it", took)
	}
	call := s.lastCall(t, "NodePrepareResources")
	if call["outcome"] != "refused whole call (1 of 2 claims)" || len(call["errors"].(map[string]string)) != 1 {
		t.Errorf("call log: %v", call)
	}
	if s.isPrepared(t, "uid-a") {
		t.Error("a claim of a refused call was prepared")
	}
}

func TestReadyBeforePreparedStillAnnouncesAClaimItsFaultFails(t *testing.T) {
	a, _, _ := threeClaims(t)
	s := serveCore(t, func(c *Config) { c.Broken[readyBeforePrepared] = true }, a)
	s.core.faults.Replace([]Fault{faultOn("prepare-error", "uid-a", "boom")})
	if got := s.prepare(t, a)["uid-a"]; got.Error == "" {
		t.Fatalf("prepare under prepare-error: %v", got)
	}
	if n := s.applied.count(); n != 1 {
		t.Errorf("%d status writes for the failed prepare, want the bug's one Ready announce", n)
	}
	s.core.faults.Replace([]Fault{{Mode: "slow-prepare", Delay: 0.05, Message: defaultFaultMessage}})
	if got := s.prepare(t, a)["uid-a"]; got.Error != "" {
		t.Fatalf("slow prepare: %v", got)
	}
	if n := s.applied.count(); n != 3 {
		t.Errorf("%d status writes in all, want 3: the slow prepare's announce and its status, not a second announce", n)
	}
}

func TestRegistrationFailureFailsGetInfoUntilCleared(t *testing.T) {
	s := serveCore(t, nil)
	s.core.faults.Replace([]Fault{faultOn("registration-failure", "", "not today")})
	_, err := s.registration.GetInfo(context.Background(), &registration.InfoRequest{})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "registration failed (injected): not today" {
		t.Errorf("GetInfo answered %v", err)
	}
	if call := s.lastCall(t, "GetInfo"); call["outcome"] != "error: not today" || !reflect.DeepEqual(call["claims"], []string{}) {
		t.Errorf("call log: %v", call)
	}
	s.core.faults.Replace(nil)
	info, err := s.registration.GetInfo(context.Background(), &registration.InfoRequest{})
	if err != nil || info.Name != heldTestDriver {
		t.Errorf("GetInfo after the fault was cleared: %v, %v", info, err)
	}
	if call := s.lastCall(t, "GetInfo"); call["outcome"] != "ok" {
		t.Errorf("call log: %v", call)
	}
}

func TestAnUnprepareAfterTheCallersDeadlineWaitsForTheSlowPrepareOfItsClaim(t *testing.T) {
	a, _, _ := threeClaims(t)
	s := serveCore(t, nil, a)
	s.core.faults.Replace([]Fault{{Mode: "slow-prepare", Delay: 0.5, Message: defaultFaultMessage}})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := s.dra.NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{Claims: v1Claims(a)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a prepare slower than its deadline answered %v", err)
	}
	// The prepare goes on; the unprepare waits for it, then undoes it (the claim's lock, held from the fault on).
	if got := s.unprepare(t, a)["uid-a"]; got.Error != "" {
		t.Fatalf("unprepare: %v", got)
	}
	if s.isPrepared(t, "uid-a") {
		t.Error("the slow prepare finished after the unprepare: the claim is left prepared")
	}
	if _, err := os.Stat(cdiSpecPath(s.core.config, "uid-a")); !os.IsNotExist(err) {
		t.Errorf("CDI spec left (%v)", err)
	}
}

func TestClaimLocksACallDidNotReachAreReleased(t *testing.T) {
	s := serveCore(t, nil)
	s.core.faults.Replace([]Fault{{Mode: "slow-prepare", Claim: ptr.To("uid-a"), Delay: 0.01, Message: defaultFaultMessage}})
	refused := &refusedCall{claims: map[string]string{"uid-b": "gone"}, reasons: []string{"gone"}}
	_, err := claimFaults(s.core)(context.Background(), prepareRequest("uid-a", "uid-b"), &grpc.UnaryServerInfo{},
		func(ctx context.Context, _ any) (any, error) {
			if _, ok := heldLocksOf(ctx)["uid-a"]; !ok {
				t.Error("the delayed claim's lock was not handed on")
			}
			return nil, refused
		})
	if err != refused {
		t.Errorf("error %v, want the service's", err)
	}
	if lock := s.core.lock("uid-a"); !lock.TryLock() {
		t.Error("the delayed claim's lock is still held")
	} else {
		lock.Unlock()
	}
}
