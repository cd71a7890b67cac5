package main

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestAReleaseThatCannotStartLeavesThePoolUnlessItsBugDeletesIt(t *testing.T) {
	for _, tc := range []struct {
		broken     string
		wantSlices int
	}{{"", 1}, {"--broken-mode=" + failedStartDeletesPool, 0}} {
		client, dir := fake.NewClientset(), t.TempDir()
		core, _ := restartedCore(t, client, dir, "--start-failure=after-publish "+tc.broken)
		err := failStart(core.config, core.api)
		if err == nil || !strings.Contains(err.Error(), "start-up failed") {
			t.Errorf("%q: the start must fail in one line naming it, got %v", tc.broken, err)
		}
		listed, listErr := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if listErr != nil || len(listed.Items) != tc.wantSlices {
			t.Errorf("%q: %d slices after the failed start (want %d), %v", tc.broken, len(listed.Items), tc.wantSlices, listErr)
		}
	}
}
