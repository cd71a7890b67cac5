package main

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The control socket: HTTP over a unix socket next to dra.sock, for switching faults and reading the call log.
//
//	GET  /healthz     {"driver", "node", "generation"}
//	GET  /faults      {"faults": [...]}
//	PUT  /faults      {"faults": [...]}  replace every fault (an empty list restores normal behaviour); answers
//	                                     after the slice and health stream reflect the change
//	GET  /calls       {"calls": [...]}   every gRPC call served, oldest first
//	GET  /prepared    {"claims": {...}}  prepared claims by UID
//	GET  /attachments {"attachments": [...]} gpu-fabric: every attach of the controller, oldest first
//
// A local socket (not a ConfigMap), so a fault change takes effect before the request returns: tests never race it.
func controlHandler(core *DriverCore, crash func()) http.Handler {
	mux := http.NewServeMux()
	// Every reply carries its length, so it is whole on the wire before anything else happens: the crash fault's
	// reply is the last thing the process writes.
	reply := func(w http.ResponseWriter, code int, body any) {
		data, _ := json.Marshal(body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(code)
		_, _ = w.Write(data)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{
			"driver": core.config.DriverName, "node": core.config.NodeName, "generation": core.Generation(),
		})
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{"faults": nonNil(core.faults.Active())})
	})
	mux.HandleFunc("PUT /faults", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Faults []json.RawMessage `json:"faults"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		faults := []Fault{}
		for _, raw := range body.Faults {
			fault, err := parseFault(raw)
			if err != nil {
				reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			faults = append(faults, fault)
		}
		for _, fault := range faults {
			if fault.Mode == "crash" { // answer first: the process is gone right after
				reply(w, http.StatusAccepted, map[string]any{"faults": faults, "crashing": true})
				if flusher, ok := w.(http.Flusher); ok {
					flusher.Flush()
				}
				crash()
			}
		}
		if err := core.SetFaults(faults); err != nil {
			reply(w, http.StatusBadGateway, map[string]string{"error": "republish slice: " + denial(err)})
			return
		}
		reply(w, http.StatusOK, map[string]any{"faults": faults, "generation": core.Generation()})
	})
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{"calls": core.calls.Calls()})
	})
	mux.HandleFunc("GET /prepared", func(w http.ResponseWriter, _ *http.Request) {
		claims, err := core.prepared.All()
		if err != nil {
			reply(w, http.StatusInternalServerError, map[string]string{"error": "prepared claims: " + err.Error()})
			return
		}
		reply(w, http.StatusOK, map[string]any{"claims": claims})
	})
	mux.HandleFunc("GET /attachments", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{"attachments": core.attachments.JSON()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusNotFound, map[string]string{"error": "no such endpoint " + r.URL.Path})
	})
	return mux
}

func nonNil(faults []Fault) []Fault {
	if faults == nil {
		return []Fault{}
	}
	return faults
}
