package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestRelease2WritesTheEnvelopeAndRelease1TheBareMapAndEachReadsBoth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepared.json")
	newer, _ := loadPreparedClaims(path, "2.0.0", false)
	if err := newer.Put("uid-1", ClaimRecord{Namespace: "ns", Name: "c"}); err != nil {
		t.Fatal(err)
	}
	var written map[string]any
	raw, _ := os.ReadFile(path)
	_ = json.Unmarshal(raw, &written)
	if written["format"] != float64(envelopeFormat) || written["writtenBy"] != "2.0.0" {
		t.Fatalf("release 2 file: %s", raw)
	}
	older, err := loadPreparedClaims(path, "1.0.0", false)
	if err != nil || older.WrittenByMajor != 2 {
		t.Fatalf("release 1 reads release 2: %v, written by %d", err, older.WrittenByMajor)
	}
	if _, ok, _ := older.Get("uid-1"); !ok {
		t.Fatal("release 1 lost the claim release 2 prepared")
	}
	if err := older.Put("uid-2", ClaimRecord{Namespace: "ns", Name: "d"}); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(path)
	var bare map[string]ClaimRecord
	if err := json.Unmarshal(raw, &bare); err != nil || len(bare) != 2 {
		t.Fatalf("release 1 file: %s (%v)", raw, err)
	}
	again, _ := loadPreparedClaims(path, "2.0.0", false)
	if all, _ := again.All(); again.WrittenByMajor != 1 || len(all) != 2 {
		t.Fatalf("release 2 reads release 1: written by %d, %d claims", again.WrittenByMajor, len(all))
	}
}

func TestEveryConcurrentPutIsOnDiskWhenItReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepared.json")
	claims, _ := loadPreparedClaims(path, "2.0.0", false)
	var wg sync.WaitGroup
	missing := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := fmt.Sprintf("uid-%d", i)
			if err := claims.Put(uid, ClaimRecord{Namespace: "ns", Name: uid}); err != nil {
				missing <- err.Error()
				return
			}
			onDisk, err := loadPreparedClaims(path, "2.0.0", false)
			if err != nil {
				missing <- err.Error()
				return
			}
			if _, ok, _ := onDisk.Get(uid); !ok {
				missing <- uid
			}
		}()
	}
	wg.Wait()
	close(missing)
	var lost []string
	for uid := range missing {
		lost = append(lost, uid)
	}
	if len(lost) > 0 {
		t.Fatalf("not on disk when Put returned: %v", lost)
	}
}

func TestSharedInstancesSeeEachOthersClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepared.json")
	old, _ := loadPreparedClaims(path, "2.0.0", true)
	fresh, _ := loadPreparedClaims(path, "2.0.0", true)
	if err := old.Put("uid-1", ClaimRecord{Namespace: "ns", Name: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := fresh.Get("uid-1"); !ok || err != nil {
		t.Fatalf("the other instance does not see a claim prepared through the first: %v", err)
	}
	if err := fresh.Remove("uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := old.Get("uid-1"); ok {
		t.Fatal("the first instance still sees a claim the other unprepared")
	}
}
