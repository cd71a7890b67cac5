package main

// The protocol-level faults act where upstream's own test driver (k8s.io/kubernetes test/e2e/dra/test-driver)
// injects its faults: in gRPC unary interceptors around the services, so the driver's core (core.go) never sees
// them. slow-<phase>, hang-<phase> and <phase>-error (phase prepare or unprepare) act around DRAPlugin's
// NodePrepareResources and NodeUnprepareResources, registration-failure around Registration's GetInfo. The faults
// that change what the driver publishes or writes (slices, health, CDI specs, status.devices, attachments) stay in
// the core, crash on the control socket.
//
// The DRAPlugin server chains the call log (outermost: one record per call, faulted or not, with the answers the
// caller gets) and the claim faults. A fault narrowed to one claim acts on that claim only, and each claim is
// faulted where the core would reach it: the claims of a call are taken in request order, as the core prepares
// them one after the other; the claims before a faulted one are handed to the service first, in one call, then the
// fault acts on the faulted claim, its lock held as the core holds it for its own work on it: it waits
// (slow-<phase>), blocks until cleared or hangLimit (hang-<phase>, ignoring the caller's deadline), then either
// answers the claim with its error (<phase>-error, a hang past hangLimit) or lets it join the claims handed on next,
// its lock still held and handed to the core, which releases it once it has prepared (unprepared) the claim: another
// call for the claim (the caller's unprepare after its deadline) waits for that, as it does for the core's work. The
// answers are merged in request order. A call no fault applies to is handed on whole and untouched.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// hangLimit is the longest a hang fault blocks a claim. A hang ignores the caller's deadline on purpose: the caller
// must notice.
const hangLimit = 300 * time.Second

const (
	preparePhase   = "prepare"
	unpreparePhase = "unprepare"
)

// claimCall is one NodePrepareResources or NodeUnprepareResources request, of either API version, as the
// interceptors see it. Answers are the version's per-claim response messages.
type claimCall struct {
	method string // as the call log names it
	phase  string // preparePhase or unpreparePhase: the faults that apply
	claims []ClaimRef
	// part is the request for the claims at these positions, in this order.
	part func(positions []int) any
	// answers are a response's answers by claim UID.
	answers func(response any) map[string]claimAnswer
	// failed is an answer that is this error.
	failed func(problem string) claimAnswer
	// response is the response of these answers.
	response func(answers map[string]claimAnswer) any
}

// claimAnswer is one claim's answer in a response: every version's message has its error text.
type claimAnswer interface{ GetError() string }

// claimCallOf is the claimCall of a request, false for any other request.
func claimCallOf(request any) (claimCall, bool) {
	switch r := request.(type) {
	case *drav1.NodePrepareResourcesRequest:
		return claimCall{
			method: "NodePrepareResources", phase: preparePhase, claims: claimsV1(r.Claims),
			part: func(at []int) any { return &drav1.NodePrepareResourcesRequest{Claims: pick(r.Claims, at)} },
			answers: func(response any) map[string]claimAnswer {
				typed, _ := response.(*drav1.NodePrepareResourcesResponse) // nil: no answers
				return answersOf(typed.GetClaims())
			},
			failed: func(problem string) claimAnswer { return &drav1.NodePrepareResourceResponse{Error: problem} },
			response: func(answers map[string]claimAnswer) any {
				return &drav1.NodePrepareResourcesResponse{Claims: typedAnswers[*drav1.NodePrepareResourceResponse](answers)}
			},
		}, true
	case *drav1.NodeUnprepareResourcesRequest:
		return claimCall{
			method: "NodeUnprepareResources", phase: unpreparePhase, claims: claimsV1(r.Claims),
			part: func(at []int) any { return &drav1.NodeUnprepareResourcesRequest{Claims: pick(r.Claims, at)} },
			answers: func(response any) map[string]claimAnswer {
				typed, _ := response.(*drav1.NodeUnprepareResourcesResponse) // nil: no answers
				return answersOf(typed.GetClaims())
			},
			failed: func(problem string) claimAnswer { return &drav1.NodeUnprepareResourceResponse{Error: problem} },
			response: func(answers map[string]claimAnswer) any {
				return &drav1.NodeUnprepareResourcesResponse{Claims: typedAnswers[*drav1.NodeUnprepareResourceResponse](answers)}
			},
		}, true
	case *drav1beta1.NodePrepareResourcesRequest:
		return claimCall{
			method: "NodePrepareResources", phase: preparePhase, claims: claimsV1beta1(r.Claims),
			part: func(at []int) any { return &drav1beta1.NodePrepareResourcesRequest{Claims: pick(r.Claims, at)} },
			answers: func(response any) map[string]claimAnswer {
				typed, _ := response.(*drav1beta1.NodePrepareResourcesResponse) // nil: no answers
				return answersOf(typed.GetClaims())
			},
			failed: func(problem string) claimAnswer { return &drav1beta1.NodePrepareResourceResponse{Error: problem} },
			response: func(answers map[string]claimAnswer) any {
				return &drav1beta1.NodePrepareResourcesResponse{Claims: typedAnswers[*drav1beta1.NodePrepareResourceResponse](answers)}
			},
		}, true
	case *drav1beta1.NodeUnprepareResourcesRequest:
		return claimCall{
			method: "NodeUnprepareResources", phase: unpreparePhase, claims: claimsV1beta1(r.Claims),
			part: func(at []int) any { return &drav1beta1.NodeUnprepareResourcesRequest{Claims: pick(r.Claims, at)} },
			answers: func(response any) map[string]claimAnswer {
				typed, _ := response.(*drav1beta1.NodeUnprepareResourcesResponse) // nil: no answers
				return answersOf(typed.GetClaims())
			},
			failed: func(problem string) claimAnswer { return &drav1beta1.NodeUnprepareResourceResponse{Error: problem} },
			response: func(answers map[string]claimAnswer) any {
				return &drav1beta1.NodeUnprepareResourcesResponse{Claims: typedAnswers[*drav1beta1.NodeUnprepareResourceResponse](answers)}
			},
		}, true
	}
	return claimCall{}, false
}

func pick[T any](items []T, positions []int) []T {
	picked := make([]T, len(positions))
	for i, position := range positions {
		picked[i] = items[position]
	}
	return picked
}

func answersOf[A claimAnswer](typed map[string]A) map[string]claimAnswer {
	answers := make(map[string]claimAnswer, len(typed))
	for uid, answer := range typed {
		answers[uid] = answer
	}
	return answers
}

func typedAnswers[A claimAnswer](answers map[string]claimAnswer) map[string]A {
	typed := make(map[string]A, len(answers))
	for uid, answer := range answers {
		typed[uid] = answer.(A)
	}
	return typed
}

// logClaimCalls records every NodePrepareResources and NodeUnprepareResources call in the call log: its claims in
// request order, its outcome and the per-claim errors of its answers, or the claims a whole-call refusal names.
func logClaimCalls(core *DriverCore) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, request any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call, ok := claimCallOf(request)
		if !ok {
			return handler(ctx, request)
		}
		started := time.Now()
		response, err := handler(ctx, request)
		uids := claimUIDs(call.claims)
		var refused *refusedCall
		switch {
		case errors.As(err, &refused):
			outcome := fmt.Sprintf("refused whole call (%d of %d claims)", len(refused.claims), len(uids))
			core.calls.Record(call.method, started, uids, outcome, refused.claims)
		case err != nil:
			core.calls.Record(call.method, started, uids, "error: "+err.Error(), nil)
		default:
			errs := map[string]string{}
			for uid, answer := range call.answers(response) {
				if problem := answer.GetError(); problem != "" {
					errs[uid] = problem
				}
			}
			core.calls.Record(call.method, started, uids, outcome(errs, len(uids)), errs)
		}
		return response, err
	}
}

func outcome(errs map[string]string, total int) string {
	if len(errs) == 0 {
		return "ok"
	}
	return fmt.Sprintf("error (%d of %d claims)", len(errs), total)
}

// claimFaults applies the slow-, hang- and -error faults of NodePrepareResources and NodeUnprepareResources.
func claimFaults(core *DriverCore) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, request any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call, ok := claimCallOf(request)
		if !ok || !anyClaimFaulted(core.faults, call) {
			return handler(ctx, request)
		}
		if call.phase == preparePhase && core.config.WholeCallRefusal {
			// The core refuses such a call before it prepares, or a fault delays or fails, any claim of it.
			if _, err := core.wholeCallLookups(call.claims); err != nil {
				return nil, err
			}
		}
		answers := map[string]claimAnswer{}
		var pending []int   // positions of the claims handed on next
		held := heldLocks{} // the locks of the delayed claims among them, which their prepare or unprepare takes over
		handOn := func() error {
			if len(pending) == 0 {
				return nil
			}
			response, err := handler(withHeldLocks(ctx, held), call.part(pending))
			for _, lock := range held { // claims the call did not reach: a whole-call refusal, a broken mode skipping them
				lock.Unlock()
			}
			held = heldLocks{}
			if err != nil {
				return err
			}
			for uid, answer := range call.answers(response) {
				answers[uid] = answer
			}
			pending = nil
			return nil
		}
		for position, claim := range call.claims {
			if !claimFaulted(core.faults, call.phase, claim.UID) {
				pending = append(pending, position)
				continue
			}
			if err := handOn(); err != nil { // the claims before this one, as the core would reach them first
				return nil, err
			}
			lock, problem := faultClaim(core, call.phase, claim)
			if problem != "" {
				lock.Unlock()
				answers[claim.UID] = call.failed(problem)
				continue
			}
			held[claim.UID] = lock // held on until the core has done the claim's work, as it holds it for a fault
			pending = append(pending, position)
		}
		if err := handOn(); err != nil {
			return nil, err
		}
		return call.response(answers), nil
	}
}

// phaseFaults are the modes of the claim faults of one phase.
func phaseFaults(phase string) []string {
	return []string{"slow-" + phase, "hang-" + phase, phase + "-error"}
}

func claimFaulted(faults *FaultSet, phase, uid string) bool {
	for _, mode := range phaseFaults(phase) {
		if _, ok := faults.Find(mode, uid, nil); ok {
			return true
		}
	}
	return false
}

func anyClaimFaulted(faults *FaultSet, call claimCall) bool {
	for _, claim := range call.claims {
		if claimFaulted(faults, call.phase, claim.UID) {
			return true
		}
	}
	return false
}

// faultClaim applies the faults of `phase` to one claim, its lock taken: the slow fault's wait, then the hang's, then
// the error fault. It returns the claim's lock, still locked, and the error text the claim is answered with, or ""
// when the claim goes on to the core.
func faultClaim(core *DriverCore, phase string, claim ClaimRef) (*sync.Mutex, string) {
	lock := core.lock(claim.UID)
	lock.Lock()
	if phase == preparePhase {
		core.claimReceived(claim)
	}
	problem := ""
	if slow, ok := core.faults.Find("slow-"+phase, claim.UID, nil); ok {
		time.Sleep(time.Duration(slow.Delay * float64(time.Second))) // the injected slowness itself
	}
	if _, ok := core.faults.Find("hang-"+phase, claim.UID, nil); ok {
		if !core.faults.WaitCleared("hang-"+phase, claim.UID, hangLimit) {
			problem = fmt.Sprintf("%s hung (injected) for %gs", phase, hangLimit.Seconds())
		}
	}
	if problem == "" {
		if injected, ok := core.faults.Find(phase+"-error", claim.UID, nil); ok {
			problem = phase + " failed (injected): " + injected.Message
		}
	}
	if problem != "" && phase == preparePhase {
		core.announcedOnReceipt(claim.UID) // answered here: the claim's next prepare is a new one
	}
	return lock, problem
}

type heldLocksKey struct{}

// withHeldLocks hands the claim locks the fault interceptor holds to the service it calls.
func withHeldLocks(ctx context.Context, held heldLocks) context.Context {
	return context.WithValue(ctx, heldLocksKey{}, held)
}

// heldLocksOf are the claim locks the fault interceptor holds for this call (none when it handed the call on whole).
func heldLocksOf(ctx context.Context) heldLocks {
	held, _ := ctx.Value(heldLocksKey{}).(heldLocks)
	return held
}

// registrationFaults applies registration-failure: GetInfo fails with UNAVAILABLE (and is logged so).
func registrationFaults(core *DriverCore) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, request any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, ok := request.(*registration.InfoRequest); ok {
			if fault, ok := core.faults.Find("registration-failure", "", nil); ok {
				core.calls.Record("GetInfo", time.Now(), nil, "error: "+fault.Message, nil)
				return nil, status.Error(codes.Unavailable, "registration failed (injected): "+fault.Message)
			}
		}
		return handler(ctx, request)
	}
}
