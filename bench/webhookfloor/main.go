// The floor of bench:gates' webhook latency: a minimal Go net/http TLS server answering a Node
// CREATE review as Berth's startup gate webhook does, for one gate given by flags. A node carrying
// the -select label gets the gate's taint and gated-at annotation as a JSON patch, any other is
// allowed as it is. The bench's nodes carry annotations and a taints list, so both are appended
// to. It prints its URL, then serves until killed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"
)

type review struct {
	Request struct {
		UID    string `json:"uid"`
		Object struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		} `json:"object"`
	} `json:"request"`
}

type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	// Encoded as base64, as the API wants it.
	Patch []byte `json:"patch,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	path := flag.String("path", "/gates/mutate-node", "")
	selector := flag.String("select", "", "the label key=value of the nodes the gate selects")
	taintFlag := flag.String("taint", "", "the gate's taint, key=value:Effect")
	annotation := flag.String("annotation", "", "the key of the gated-at annotation")
	flag.Parse()

	labelKey, labelValue, _ := strings.Cut(*selector, "=")
	keyValue, effect, _ := strings.Cut(*taintFlag, ":")
	taintKey, taintValue, _ := strings.Cut(keyValue, "=")
	gateTaint := taint{Key: taintKey, Value: taintValue, Effect: effect}
	annotationPath := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(*annotation)

	http.HandleFunc(*path, func(w http.ResponseWriter, r *http.Request) {
		var in review
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := response{UID: in.Request.UID, Allowed: true}
		if in.Request.Object.Metadata.Labels[labelKey] == labelValue {
			// The time as JavaScript's toISOString writes it, as Berth does.
			now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
			patch, err := json.Marshal([]patchOp{
				{Op: "add", Path: annotationPath, Value: now},
				{Op: "add", Path: "/spec/taints/-", Value: gateTaint},
			})
			if err != nil {
				log.Fatal(err)
			}
			out.PatchType, out.Patch = "JSONPatch", patch
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "admission.k8s.io/v1",
			"kind":       "AdmissionReview",
			"response":   out,
		}); err != nil {
			log.Print(err)
		}
	})
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("https://%s%s\n", listener.Addr(), *path)
	log.Fatal(http.ServeTLS(listener, nil, *cert, *key))
}
