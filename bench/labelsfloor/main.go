// The floor of bench:memory: the labels job done by the simplest program. It lists and watches
// nodes and pods over plain HTTP/JSON (no client library), keeps of each only the fields the job
// reads (a node's labels; a pod's node and node selector), and merge-patches the derived label onto
// every node that carries the input label and lacks it. It prints "ready" once both lists are in
// and its patches answered, then runs until killed; the benchmark reads its resident memory.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync"

	"berth.dev/bench/apiclient"
)

type meta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
}

type object struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		NodeName     string            `json:"nodeName"`
		NodeSelector map[string]string `json:"nodeSelector"`
	} `json:"spec"`
}

type list struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []object `json:"items"`
}

type node struct{ labels map[string]string }
type pod struct {
	node     string
	selector map[string]string
}

var (
	input   = flag.String("input", "", "the input label")
	derived = flag.String("derived", "", "the derived label")

	client *http.Client
	mu     sync.Mutex
	nodes  = map[string]node{}
	pods   = map[string]pod{}
)

func get(path string) *http.Response {
	res, err := client.Get(*apiclient.Server + path)
	if err != nil {
		log.Fatal(err)
	}
	if res.StatusCode != 200 {
		log.Fatalf("GET %s: %s", path, res.Status)
	}
	return res
}

// listAll pages through a list and returns its resourceVersion.
func listAll(path string, keep func(object)) string {
	cont := ""
	for {
		res := get(fmt.Sprintf("%s?limit=500&continue=%s", path, cont))
		var l list
		if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		for _, o := range l.Items {
			keep(o)
		}
		if l.Metadata.Continue == "" {
			return l.Metadata.ResourceVersion
		}
		cont = l.Metadata.Continue
	}
}

func watch(path, rv string, keep func(object), drop func(object)) {
	for {
		res := get(fmt.Sprintf("%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s", path, rv))
		s := bufio.NewScanner(res.Body)
		s.Buffer(make([]byte, 1<<20), 16<<20)
		for s.Scan() {
			var e struct {
				Type   string `json:"type"`
				Object object `json:"object"`
			}
			if json.Unmarshal(s.Bytes(), &e) != nil {
				continue
			}
			rv = e.Object.Metadata.ResourceVersion
			switch e.Type {
			case "ADDED", "MODIFIED":
				keep(e.Object)
			case "DELETED":
				drop(e.Object)
			}
		}
		res.Body.Close()
	}
}

func label(name string) {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{*derived: "true"}}})
	req, _ := http.NewRequest("PATCH", *apiclient.Server+"/api/v1/nodes/"+name, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/merge-patch+json")
	res, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
}

func keepNode(o object) (patch bool) {
	mu.Lock()
	defer mu.Unlock()
	nodes[o.Metadata.Name] = node{labels: o.Metadata.Labels}
	_, has := o.Metadata.Labels[*input]
	return has && o.Metadata.Labels[*derived] != "true"
}

func main() {
	flag.Parse()
	client = apiclient.New(16)

	var todo []string
	nodeRV := listAll("/api/v1/nodes", func(o object) {
		if keepNode(o) {
			todo = append(todo, o.Metadata.Name)
		}
	})
	keepPod := func(o object) {
		mu.Lock()
		pods[o.Metadata.Namespace+"/"+o.Metadata.Name] = pod{node: o.Spec.NodeName, selector: o.Spec.NodeSelector}
		mu.Unlock()
	}
	podRV := listAll("/api/v1/pods", keepPod)
	var wg sync.WaitGroup
	work := make(chan string)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				label(n)
			}
		}()
	}
	for _, n := range todo {
		work <- n
	}
	close(work)
	wg.Wait()
	fmt.Println("ready")
	go watch("/api/v1/pods", podRV, keepPod, func(o object) {
		mu.Lock()
		delete(pods, o.Metadata.Namespace+"/"+o.Metadata.Name)
		mu.Unlock()
	})
	watch("/api/v1/nodes", nodeRV, func(o object) {
		if keepNode(o) {
			label(o.Metadata.Name)
		}
	}, func(o object) {
		mu.Lock()
		delete(nodes, o.Metadata.Name)
		mu.Unlock()
	})
}
