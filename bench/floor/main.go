// An allow-all admission webhook pair: the floor our server is measured against.
//
// It answers POST /mutate and POST /validate over TLS with "allowed: true" and the request's
// uid, and does nothing else: the least any webhook must do (TLS, HTTP, decode the review,
// encode a response). Standard library only (net/http, crypto/tls, encoding/json): a module of
// its own that needs no downloads. The benches build it once per source and Go version into
// ~/.cache/flux-gate-admission/tools (bench/through_apiserver.py); by hand:
//
//	cd bench/floor && GOPROXY=off GOTOOLCHAIN=local go build -trimpath -o /tmp/admission-floor .
//	/tmp/admission-floor -addr 127.0.0.1:9444 -cert tls.crt -key tls.key
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
)

var served int64 // reviews answered, at /count: the bench knows when the API server calls us

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response *response `json:"response,omitempty"`
}

type response struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func allow(w http.ResponseWriter, r *http.Request) {
	atomic.AddInt64(&served, 1)
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: in.APIVersion, Kind: in.Kind, Response: &response{UID: in.Request.UID, Allowed: true}}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		log.Printf("write: %v", err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9444", "listen address")
	cert := flag.String("cert", "tls.crt", "serving certificate")
	key := flag.String("key", "tls.key", "serving key")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", allow)
	mux.HandleFunc("/validate", allow)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strconv.FormatInt(atomic.LoadInt64(&served), 10)))
	})
	server := &http.Server{Addr: *addr, Handler: mux, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
