package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// envelopeFormat: release 2 writes the prepared claims inside an envelope that names its format and writer;
// release 1 wrote the bare map. Both read both, so a downgrade keeps what the newer release prepared.
const envelopeFormat = 2

// PreparedDevice is one device of a prepared claim, as NodePrepareResources answers it. AdminAccess is not part of
// the answer: it records that the claim holds the device for administrative access only, so it holds it for no one
// else (held.go); absent in files written before it was recorded.
type PreparedDevice struct {
	RequestNames []string `json:"requestNames"`
	PoolName     string   `json:"poolName"`
	DeviceName   string   `json:"deviceName"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	ShareID      string   `json:"shareID,omitempty"`
	AdminAccess  bool     `json:"adminAccess,omitempty"`
}

// ClaimRecord is what was prepared for one claim.
type ClaimRecord struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

type envelope struct {
	Format    int                    `json:"format"`
	WrittenBy string                 `json:"writtenBy"`
	Claims    map[string]ClaimRecord `json:"claims"`
}

// PreparedClaims maps claim UID to its record, written to a file on every change (atomically), so prepare is
// idempotent and unprepare works after a restart, also across releases of the driver.
//
// During a rolling update two instances serve one node, and the kubelet may prepare a claim through one and
// unprepare it through the other. Shared, every operation reads the file under an exclusive file lock and writes it
// before letting go, so neither instance works from a stale copy.
type PreparedClaims struct {
	path          string
	driverVersion string
	shared        bool
	// WrittenByMajor is the major release that wrote the file (1 for the bare map, or no file).
	WrittenByMajor int
	mu             sync.Mutex // guards claims and version
	claims         map[string]ClaimRecord
	version        int64 // changes made in memory
	// writeMu serializes file writes (taken before mu, never while holding it); written is the last version on disk.
	writeMu sync.Mutex
	written int64
	// writesOutsideLock is checkpoint-written-outside-lock: each change re-reads the file and writes it back with
	// its own change alone, holding no lock.
	writesOutsideLock bool
}

func loadPreparedClaims(path, driverVersion string, shared bool) (*PreparedClaims, error) {
	p := &PreparedClaims{path: path, driverVersion: driverVersion, shared: shared}
	return p, p.load()
}

// load reads the file (no file: no claims), in either release's format.
func (p *PreparedClaims) load() error {
	p.claims, p.WrittenByMajor = map[string]ClaimRecord{}, 1
	raw, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return err
	}
	var format int
	if probe["format"] != nil && json.Unmarshal(probe["format"], &format) == nil {
		var e envelope
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		if e.Claims != nil {
			p.claims = e.Claims
		}
		p.WrittenByMajor, _ = strconv.Atoi(strings.SplitN(e.WrittenBy, ".", 2)[0])
		return nil
	}
	return json.Unmarshal(raw, &p.claims)
}

// locked runs `operation` holding the in-memory lock and, shared, the file lock on a file it has just re-read.
func (p *PreparedClaims) locked(operation func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.shared {
		return operation()
	}
	lock, err := os.OpenFile(strings.TrimSuffix(p.path, filepath.Ext(p.path))+".lock", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if err := p.load(); err != nil {
		return err
	}
	return operation()
}

// Get returns the record of a prepared claim.
func (p *PreparedClaims) Get(uid string) (record ClaimRecord, found bool, err error) {
	err = p.locked(func() error {
		record, found = p.claims[uid]
		return nil
	})
	return record, found, err
}

// All returns every record by UID.
func (p *PreparedClaims) All() (map[string]ClaimRecord, error) {
	copied := map[string]ClaimRecord{}
	err := p.locked(func() error {
		for uid, record := range p.claims {
			copied[uid] = record
		}
		return nil
	})
	return copied, err
}

// Put remembers a prepared claim; it is on disk when Put returns.
func (p *PreparedClaims) Put(uid string, record ClaimRecord) error {
	return p.change(func(claims map[string]ClaimRecord) { claims[uid] = record })
}

// Remove forgets a claim (unprepared); on disk when Remove returns.
func (p *PreparedClaims) Remove(uid string) error {
	return p.change(func(claims map[string]ClaimRecord) { delete(claims, uid) })
}

// changeOutsideLock is checkpoint-written-outside-lock: the change is made in memory, then applied to what the file
// holds now and written back, with no lock held from the read to the write (slow storage widens the window), so
// concurrent changes overwrite each other on disk and a restart loads a file that lost some of them.
func (p *PreparedClaims) changeOutsideLock(apply func(map[string]ClaimRecord)) error {
	p.mu.Lock()
	apply(p.claims)
	p.mu.Unlock()
	disk := &PreparedClaims{path: p.path, driverVersion: p.driverVersion}
	if err := disk.load(); err != nil {
		return err
	}
	time.Sleep(checkpointWriteWindow)
	apply(disk.claims)
	encoded, err := disk.encoded()
	if err != nil {
		return err
	}
	partial, err := os.CreateTemp(filepath.Dir(p.path), "prepared-*.partial")
	if err != nil {
		return err
	}
	defer os.Remove(partial.Name())
	if _, err := partial.Write(encoded); err != nil {
		partial.Close()
		return err
	}
	if err := partial.Close(); err != nil {
		return err
	}
	return os.Rename(partial.Name(), p.path)
}

// change applies one change in memory and returns once a file that holds it is written. Not shared, changes made
// while a write is in progress are committed together by the next writer, which encodes the map once for all of
// them: under 100 concurrent prepares, one write per change queued them all behind each other's file renames.
func (p *PreparedClaims) change(apply func(map[string]ClaimRecord)) error {
	if p.writesOutsideLock {
		return p.changeOutsideLock(apply)
	}
	if p.shared { // other instances read the file under the file lock held here
		return p.locked(func() error {
			apply(p.claims)
			return p.write()
		})
	}
	p.mu.Lock()
	apply(p.claims)
	p.version++
	version := p.version
	p.mu.Unlock()
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if version <= p.written {
		return nil // a writer that came first wrote this change with its own
	}
	p.mu.Lock()
	latest := p.version
	encoded, err := p.encoded()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := replaceFile(p.path, encoded); err != nil {
		return err
	}
	p.written = latest
	return nil
}

func (p *PreparedClaims) write() error {
	encoded, err := p.encoded()
	if err != nil {
		return err
	}
	return replaceFile(p.path, encoded)
}

// encoded is the file's content: release 2 and later write the envelope, release 1 the bare map.
func (p *PreparedClaims) encoded() ([]byte, error) {
	var body any = p.claims
	if major, _ := strconv.Atoi(strings.SplitN(p.driverVersion, ".", 2)[0]); major >= envelopeFormat {
		body = envelope{Format: envelopeFormat, WrittenBy: p.driverVersion, Claims: p.claims}
	}
	return json.Marshal(body)
}

// replaceFile writes `body` to a partial file and renames it into place, creating the directory if it is missing.
func replaceFile(path string, body []byte) error {
	partial := strings.TrimSuffix(path, filepath.Ext(path)) + ".partial"
	if err := os.WriteFile(partial, body, 0o644); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(partial, body, 0o644); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return os.Rename(partial, path)
}
