// The floor of bench:evict: the evictions done by the simplest program. It reads the pods to evict
// from stdin ("namespace name uid" per line), then POSTs one Eviction per pod (policy/v1, uid as a
// precondition) over plain HTTP/JSON at a fixed concurrency. It prints "start <unix ms>" just before
// its first request, "evicted <name> <unix ms>" as each is answered, and "done <refused>" after
// its last; the benchmark times each pod from that start to its answer and to its going, as
// seen by its own watch.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/bench/apiclient"
)

var (
	concurrency = flag.Int("concurrency", 16, "evictions in flight")
)

func main() {
	flag.Parse()
	client := apiclient.New(*concurrency)

	var pods [][3]string
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if f := strings.Fields(in.Text()); len(f) == 3 {
			pods = append(pods, [3]string{f[0], f[1], f[2]})
		}
	}

	// One writer, so lines from many goroutines never interleave.
	out := make(chan string, len(pods))
	printed := make(chan struct{})
	go func() {
		w := bufio.NewWriter(os.Stdout)
		for line := range out {
			w.WriteString(line)
		}
		w.Flush()
		close(printed)
	}()

	var refused atomic.Int64
	evict := func(p [3]string) {
		body, _ := json.Marshal(map[string]any{
			"apiVersion":    "policy/v1",
			"kind":          "Eviction",
			"metadata":      map[string]string{"namespace": p[0], "name": p[1]},
			"deleteOptions": map[string]any{"preconditions": map[string]string{"uid": p[2]}},
		})
		url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/eviction", *apiclient.Server, p[0], p[1])
		res, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode/100 == 2 {
			out <- fmt.Sprintf("evicted %s %d\n", p[1], time.Now().UnixMilli())
		} else {
			refused.Add(1)
		}
	}

	work := make(chan [3]string)
	var wg sync.WaitGroup
	for i := 0; i < *concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				evict(p)
			}
		}()
	}
	fmt.Printf("start %d\n", time.Now().UnixMilli())
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	close(out)
	<-printed
	fmt.Printf("done %d\n", refused.Load())
}
