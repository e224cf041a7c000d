// The floor of bench:scale's time to cache: the simplest program that holds what Berth's caches
// hold. It lists each resource it is given in pages of 500 over plain HTTP/JSON (no client
// library), all at once as Berth's informers do, decoding each page as it arrives into the fields a
// cache keys by, and prints one JSON line: the seconds until each resource and all were in, and
// how many objects each held.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"berth.dev/bench/apiclient"
)

type list struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name            string `json:"name"`
			Namespace       string `json:"namespace"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"items"`
}

// listAll pages through path and answers how many objects it held.
func listAll(client *http.Client, path string) int {
	keys := map[string]string{}
	cont := ""
	for {
		res, err := client.Get(fmt.Sprintf("%s%s?limit=500&continue=%s", *apiclient.Server, path, url.QueryEscape(cont)))
		if err != nil {
			log.Fatal(err)
		}
		if res.StatusCode != 200 {
			log.Fatalf("GET %s: %s", path, res.Status)
		}
		var l list
		if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		for _, o := range l.Items {
			keys[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Metadata.ResourceVersion
		}
		if l.Metadata.Continue == "" {
			return len(keys)
		}
		cont = l.Metadata.Continue
	}
}

func main() {
	paths := flag.String("paths", "/api/v1/nodes,/api/v1/pods", "comma-separated collection paths")
	flag.Parse()
	client := apiclient.New(8)
	start := time.Now()
	out := map[string]any{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range strings.Split(*paths, ",") {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := listAll(client, p)
			mu.Lock()
			out[p] = map[string]any{"seconds": time.Since(start).Seconds(), "objects": n}
			mu.Unlock()
		}()
	}
	wg.Wait()
	out["seconds"] = time.Since(start).Seconds()
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
