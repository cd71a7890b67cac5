package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestSlicesPrintsThePoolTheCommandLinePublishesFirst(t *testing.T) {
	args := []string{"--driver-name=d.example.com", "--node-name=n1", "--devices=3", "--kubelet-root=/unused"}
	var out bytes.Buffer
	if code := printSlices(args, noEnv, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var printed []map[string]any
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatalf("not a JSON list: %v\n%s", err, out.String())
	}
	c, err := parseArgs(args, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := asJSONValue(t, resourceSlices(c, 1, poolShape{published: 3}))
	for _, slice := range printed {
		if slice["apiVersion"] != "resource.k8s.io/v1" || slice["kind"] != "ResourceSlice" {
			t.Errorf("slice %v: apiVersion %v, kind %v", slice["metadata"], slice["apiVersion"], slice["kind"])
		}
		delete(slice, "apiVersion")
		delete(slice, "kind")
	}
	if !reflect.DeepEqual(asJSONValue(t, printed), want) {
		t.Errorf("printed %s, want the pool of generation 1", out.String())
	}
	if code := printSlices([]string{"--node-name=n1"}, noEnv, &out); code == 0 {
		t.Error("no --driver-name, yet exit 0")
	}
}
