// Command slice-allocator runs the scheduler's structured allocator (k8s.io/dynamic-resource-allocation/structured,
// the pinned release) over ResourceSlices with no cluster, for `dra-conformance slices check`.
//
// It reads one JSON document on stdin:
//
//	{"slices": [ResourceSlice, ...], "features": {...}, "timeoutSeconds": 5,
//	 "plans": [{"id": "...", "mode": "joint"|"sequential", "claims": [[{"selector": "<CEL>", "count": 1}, ...], ...]}]}
//
// and prints one JSON document on stdout: for each plan, whether the allocator allocated it and which devices it
// picked for each claim. "joint" hands every claim of the plan to one Allocate call (one pod with several claims);
// "sequential" allocates the claims one after another, each with the devices of the earlier ones as allocated
// state (pods scheduled one after another), which is the path that must account for counters consumed by
// allocations it did not make itself. Judging the results (counters, exclusivity) is the caller's job: this program
// only reports what the allocator did. Errors of the input go to stderr with exit code 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// className is the one DeviceClass every request names: it selects nothing, the requests' own selectors do.
const className = "slices-check"

// celCacheSize: the selectors of one run are a few per device and per shape; the cache only saves recompiling.
const celCacheSize = 1024

// request is one request of a claim: `count` devices (ExactCount) that `selector` (CEL) matches.
type request struct {
	Selector string `json:"selector"`
	Count    int64  `json:"count"`
}

// plan is one combination to try.
type plan struct {
	ID     string      `json:"id"`
	Mode   string      `json:"mode"`
	Claims [][]request `json:"claims"`
}

// input is the document read on stdin.
type input struct {
	Slices         []resourceapi.ResourceSlice `json:"slices"`
	Features       structured.Features         `json:"features"`
	TimeoutSeconds float64                     `json:"timeoutSeconds"`
	Plans          []plan                      `json:"plans"`
}

// picked is one device of an allocation.
type picked struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

// outcome is what the allocator did with one plan.
type outcome struct {
	ID string `json:"id"`
	// Status: "allocated", "unallocatable" (the allocator found no allocation), "error" (it failed) or "timeout".
	Status string `json:"status"`
	// Claims: the devices of each claim, in plan order (only when allocated).
	Claims  [][]picked `json:"claims,omitempty"`
	Error   string     `json:"error,omitempty"`
	Seconds float64    `json:"seconds"`
}

// output is the document printed on stdout.
type output struct {
	Outcomes []outcome `json:"outcomes"`
	Seconds  float64   `json:"seconds"`
}

// classes is the DeviceClassLister of the one class.
type classes struct{ class *resourceapi.DeviceClass }

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{c.class}, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != c.class.Name {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return c.class, nil
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "slice-allocator: %v\n", err)
		os.Exit(2)
	}
}

func run(in io.Reader, out io.Writer) error {
	var doc input
	decoder := json.NewDecoder(in)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&doc); err != nil {
		return fmt.Errorf("read input: %w", err)
	}
	if doc.TimeoutSeconds <= 0 {
		return errors.New("read input: timeoutSeconds must be positive")
	}
	slices := make([]*resourceapi.ResourceSlice, len(doc.Slices))
	for i := range doc.Slices {
		slices[i] = &doc.Slices[i]
	}
	lister := classes{&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: className}}}
	cache := cel.NewCache(celCacheSize, cel.Features{})
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "slices-check-node"}}
	timeout := time.Duration(doc.TimeoutSeconds * float64(time.Second))
	started := time.Now()
	result := output{Outcomes: make([]outcome, 0, len(doc.Plans))}
	for _, p := range doc.Plans {
		result.Outcomes = append(result.Outcomes, try(doc.Features, lister, slices, cache, node, timeout, p))
	}
	result.Seconds = time.Since(started).Seconds()
	encoder := json.NewEncoder(out)
	return encoder.Encode(result)
}

// try runs one plan and reports what the allocator did.
func try(features structured.Features, lister classes, slices []*resourceapi.ResourceSlice, cache *cel.Cache,
	node *v1.Node, timeout time.Duration, p plan) outcome {
	started := time.Now()
	done := func(o outcome) outcome {
		o.ID = p.ID
		o.Seconds = time.Since(started).Seconds()
		return o
	}
	claims := make([]*resourceapi.ResourceClaim, len(p.Claims))
	for i, requests := range p.Claims {
		claims[i] = claim(fmt.Sprintf("%s-%d", p.ID, i), requests)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var groups [][]*resourceapi.ResourceClaim
	switch p.Mode {
	case "joint":
		groups = [][]*resourceapi.ResourceClaim{claims}
	case "sequential":
		for _, one := range claims {
			groups = append(groups, []*resourceapi.ResourceClaim{one})
		}
	default:
		return done(outcome{Status: "error", Error: fmt.Sprintf("unknown mode %q", p.Mode)})
	}
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	var picks [][]picked
	for _, group := range groups {
		allocator, err := structured.NewAllocator(ctx, features, state, lister, slices, cache)
		if err != nil {
			return done(outcome{Status: "error", Error: err.Error()})
		}
		results, err := allocator.Allocate(ctx, node, group)
		switch {
		case ctx.Err() != nil:
			return done(outcome{Status: "timeout", Error: fmt.Sprintf("no answer within %s", timeout)})
		case err != nil && errors.Is(err, structured.ErrFailedAllocationOnNode):
			return done(outcome{Status: "unallocatable", Error: err.Error()})
		case err != nil:
			return done(outcome{Status: "error", Error: err.Error()})
		case results == nil:
			return done(outcome{Status: "unallocatable"})
		}
		for _, allocation := range results {
			var devices []picked
			for _, r := range allocation.Devices.Results {
				devices = append(devices, picked{r.Request, r.Driver, r.Pool, r.Device})
				id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
				state.AllocatedDevices.Insert(id)
				if r.ShareID != nil {
					state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				}
			}
			picks = append(picks, devices)
		}
	}
	return done(outcome{Status: "allocated", Claims: picks})
}

// claim is a ResourceClaim with one ExactCount request per entry of `requests`, tolerating every taint: taints are
// the driver's deliberate signal, not a property of its counters.
func claim(name string, requests []request) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "slices-check", UID: types.UID(name)},
	}
	for i, r := range requests {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("r%d", i),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: className,
				Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: r.Selector}}},
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           r.Count,
				Tolerations:     []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}},
			},
		})
	}
	return c
}
