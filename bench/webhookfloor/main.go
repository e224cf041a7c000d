// The floor of bench:gates' and bench:arch's webhook latency: a minimal Go net/http TLS server
// answering a review with the patch Berth's webhook answers, for one policy given by flags.
//   - gates: Node CREATE. A node carrying the -select label gets the gate's taint, and its gated-at
//     and taint record annotations, any other is allowed as it is. The bench's nodes carry annotations and a taints
//     list, so both are appended to.
//   - arch: Pod CREATE. A pod of the -namespace the ArchPlacement selects is placed at admission:
//     kubernetes.io/arch In the architectures its images share (from -images, what Berth has
//     cached), the state label and the policy and result annotations; any other is allowed as it
//     is. The bench's pods carry labels, and no affinity or gates.
//   - agents: Pod CREATE. A pod of the -namespace with the -select label gets the AgentPlacement
//     -policy's wait-for-agent init container (-container, the JSON Berth builds for it) first among
//     its init containers, and the annotation naming the placement.
//
// It prints its URL, then serves until killed.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

type container struct {
	Image string `json:"image"`
}

type review struct {
	Request struct {
		UID       string `json:"uid"`
		Namespace string `json:"namespace"`
		Object    struct {
			Metadata struct {
				Namespace   string            `json:"namespace"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				InitContainers []container `json:"initContainers"`
				Containers     []container `json:"containers"`
			} `json:"spec"`
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

// image is what Berth knows of one image: its digest and platforms (os/arch[/variant]).
type image struct {
	Image     string   `json:"image"`
	Digest    string   `json:"digest"`
	Platforms []string `json:"platforms"`
}

// result is the arch.berth.dev/result annotation of a pod placed at admission, keys in Berth's order.
type result struct {
	Architectures []string `json:"architectures"`
	PlacedAt      string   `json:"placedAt"`
	Images        []image  `json:"images"`
}

type requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

type term struct {
	MatchExpressions []requirement `json:"matchExpressions"`
}

type affinity struct {
	NodeAffinity struct {
		Required struct {
			NodeSelectorTerms []term `json:"nodeSelectorTerms"`
		} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
	} `json:"nodeAffinity"`
}

// escape makes a key one segment of a JSON Pointer.
var escape = strings.NewReplacer("~", "~0", "/", "~1").Replace

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "its private key (PEM)")
	clientCA := flag.String("client-ca", "", "CA (PEM) whose client certificates alone complete a handshake, as Berth's --webhook-client-ca")
	webhook := flag.String("webhook", "gates", "the webhook it stands for: gates or arch")
	selector := flag.String("select", "", "gates: the label key=value of the nodes the gate selects")
	taintFlag := flag.String("taint", "", "gates: the gate's taint, key=value:Effect")
	annotation := flag.String("annotation", "", "gates: the key of the gated-at annotation")
	record := flag.String("record", "", "gates: the key of the annotation recording the gate's taint (key=value:Effect)")
	namespace := flag.String("namespace", "", "arch: the namespace whose pods the ArchPlacement places")
	policy := flag.String("policy", "", "arch: the ArchPlacement's name")
	imagesFile := flag.String("images", "", "arch: JSON file, image reference → {digest, platforms}")
	containerFile := flag.String("container", "", "agents: JSON file, the init container Berth injects")
	flag.Parse()

	var path string
	var patch func(*review) ([]patchOp, error)
	switch *webhook {
	case "gates":
		path = "/gates/mutate-node"
		labelKey, labelValue, _ := strings.Cut(*selector, "=")
		keyValue, effect, _ := strings.Cut(*taintFlag, ":")
		taintKey, taintValue, _ := strings.Cut(keyValue, "=")
		gateTaint := taint{Key: taintKey, Value: taintValue, Effect: effect}
		annotationPath := "/metadata/annotations/" + escape(*annotation)
		recordPath := "/metadata/annotations/" + escape(*record)
		patch = func(in *review) ([]patchOp, error) {
			if in.Request.Object.Metadata.Labels[labelKey] != labelValue {
				return nil, nil
			}
			// The time as JavaScript's toISOString writes it, as Berth does.
			now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
			return []patchOp{
				{Op: "add", Path: annotationPath, Value: now},
				{Op: "add", Path: recordPath, Value: *taintFlag},
				{Op: "add", Path: "/spec/taints/-", Value: gateTaint},
			}, nil
		}
	case "arch":
		path = "/arch/mutate-pod"
		data, err := os.ReadFile(*imagesFile)
		if err != nil {
			log.Fatal(err)
		}
		var images map[string]image
		if err := json.Unmarshal(data, &images); err != nil {
			log.Fatal(err)
		}
		patch = func(in *review) ([]patchOp, error) {
			return placePod(in, *namespace, *policy, images)
		}
	case "agents":
		path = "/agents/mutate-pod"
		data, err := os.ReadFile(*containerFile)
		if err != nil {
			log.Fatal(err)
		}
		var container json.RawMessage = data
		labelKey, labelValue, _ := strings.Cut(*selector, "=")
		patch = func(in *review) ([]patchOp, error) {
			pod := &in.Request.Object
			if podNamespace(in) != *namespace || pod.Metadata.Labels[labelKey] != labelValue {
				return nil, nil
			}
			ops := annotate(pod.Metadata.Annotations, map[string]string{"agents.berth.dev/wait-for-agent": *policy})
			if len(pod.Spec.InitContainers) == 0 {
				return append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: []json.RawMessage{container}}), nil
			}
			return append(ops, patchOp{Op: "add", Path: "/spec/initContainers/0", Value: container}), nil
		}
	default:
		log.Fatalf("-webhook %q: gates, arch or agents", *webhook)
	}

	http.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		var in review
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ops, err := patch(&in)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := response{UID: in.Request.UID, Allowed: true}
		if ops != nil {
			if out.Patch, err = json.Marshal(ops); err != nil {
				log.Fatal(err)
			}
			out.PatchType = "JSONPatch"
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
	fmt.Printf("https://%s%s\n", listener.Addr(), path)
	server := &http.Server{}
	if *clientCA != "" {
		pem, err := os.ReadFile(*clientCA)
		if err != nil {
			log.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			log.Fatalf("no certificate in %s", *clientCA)
		}
		server.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	}
	log.Fatal(server.ServeTLS(listener, *cert, *key))
}

// placePod is the arch webhook's patch for a pod whose images are all known and share a Linux
// architecture; nil for a pod of another namespace. An unknown image is an error: the floor cannot
// stand for the gate Berth would answer.
func placePod(in *review, namespace, policy string, images map[string]image) ([]patchOp, error) {
	pod := &in.Request.Object
	if podNamespace(in) != namespace {
		return nil, nil
	}
	var known []image
	var common []string
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if slices.ContainsFunc(known, func(i image) bool { return i.Image == c.Image }) {
			continue
		}
		img, ok := images[c.Image]
		if !ok {
			return nil, fmt.Errorf("image %s unknown to the floor", c.Image)
		}
		img.Image = c.Image
		var archs []string
		for _, p := range img.Platforms {
			if parts := strings.Split(p, "/"); parts[0] == "linux" && !slices.Contains(archs, parts[1]) {
				archs = append(archs, parts[1])
			}
		}
		if known == nil {
			common = archs
		} else {
			common = slices.DeleteFunc(common, func(a string) bool { return !slices.Contains(archs, a) })
		}
		known = append(known, img)
	}
	if len(common) == 0 {
		return nil, fmt.Errorf("the images of pod %s share no architecture", in.Request.UID)
	}
	slices.Sort(common)
	text, err := json.Marshal(result{Architectures: common, PlacedAt: "admission", Images: known})
	if err != nil {
		return nil, err
	}
	var place affinity
	place.NodeAffinity.Required.NodeSelectorTerms = []term{
		{MatchExpressions: []requirement{{Key: "kubernetes.io/arch", Operator: "In", Values: common}}},
	}
	ops := []patchOp{{Op: "add", Path: "/metadata/labels/" + escape("arch.berth.dev/state"), Value: "Placed"}}
	ops = append(ops, annotate(pod.Metadata.Annotations, map[string]string{
		"arch.berth.dev/policy": policy,
		"arch.berth.dev/result": string(text),
	})...)
	return append(ops, patchOp{Op: "add", Path: "/spec/affinity", Value: place}), nil
}

// podNamespace is the pod's namespace: a pod made from a template carries none of its own at admission.
func podNamespace(in *review) string {
	if ns := in.Request.Object.Metadata.Namespace; ns != "" {
		return ns
	}
	return in.Request.Namespace
}

// annotate adds annotations: the whole map on a pod with none, else each key (keeping the others).
func annotate(existing map[string]string, add map[string]string) []patchOp {
	if len(existing) == 0 {
		return []patchOp{{Op: "add", Path: "/metadata/annotations", Value: add}}
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ops := make([]patchOp, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escape(k), Value: add[k]})
	}
	return ops
}
