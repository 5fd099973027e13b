// Command extenderload plays kube-scheduler against the iadeep scheduler extender, for
// benchmarks/extender.py (which starts etcd and the extender, writes the requests and reads the
// result).
//
// kube-scheduler runs one scheduling cycle at a time (filter, then prioritize, for one pod) and
// binds asynchronously; this client does the same, over one keep-alive HTTP client as
// kube-scheduler's HTTPExtender does. It is written in Go, like kube-scheduler, so that its own
// cost per pod is close to kube-scheduler's and the measurement is about the extender.
//
// Input (-requests FILE, JSON): {"prefix": "/iadeep", "pods": [{"name", "namespace", "uid",
// "args": <ExtenderArgs for filter and prioritize>}, ...]}. The pods are used in order: -warmup
// scheduled one by one, then -latency one by one with each call timed, then -throughput with
// binds on -bind-workers goroutines. Output (stdout, JSON): per-call latencies (ms) of the latency
// phase, the throughput phase's wall time (s) and bind latencies (ms: from the first bind call to
// the successful one, so a refused bind and its rescheduling count), binds refused and rescheduled,
// and pods found unschedulable (filter passed no node: kube-scheduler would requeue them; here they
// are counted and left out).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"sync"
	"time"
)

type pod struct {
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	UID       string          `json:"uid"`
	Args      json.RawMessage `json:"args"`
}

type input struct {
	Prefix string `json:"prefix"`
	Pods   []pod  `json:"pods"`
}

// Wire format of k8s.io/kube-scheduler/extender/v1 (Go field names are the JSON keys).
type filterResult struct {
	NodeNames *[]string
	Error     string
}

type hostPriority struct {
	Host  string
	Score int64
}

type bindingArgs struct {
	PodName      string
	PodNamespace string
	PodUID       string
	Node         string
}

type bindingResult struct {
	Error string
}

// errUnschedulable: the extender's filter passed no node for the pod.
var errUnschedulable = errors.New("unschedulable")

type client struct {
	http *http.Client
	base string
	rng  *rand.Rand
}

func (c *client) post(verb string, body []byte, out any) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.http.Post(c.base+"/"+verb, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", verb, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	dt := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s: reading the answer: %w", verb, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d: %.300s", verb, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return 0, fmt.Errorf("%s: %w", verb, err)
	}
	return dt, nil
}

// schedule runs one scheduling cycle: filter, prioritize, pick the best node (ties at random, as
// kube-scheduler's selectHost does) and return the bind request.
func (c *client) schedule(p pod) (filterDt, prioDt time.Duration, bind []byte, err error) {
	var f filterResult
	if filterDt, err = c.post("filter", p.Args, &f); err != nil {
		return
	}
	if f.Error != "" || f.NodeNames == nil || len(*f.NodeNames) == 0 {
		err = fmt.Errorf("%w: filter %s/%s: no feasible node: %q", errUnschedulable, p.Namespace, p.Name, f.Error)
		return
	}
	var scores []hostPriority
	if prioDt, err = c.post("prioritize", p.Args, &scores); err != nil {
		return
	}
	feasible := make(map[string]bool, len(*f.NodeNames))
	for _, n := range *f.NodeNames {
		feasible[n] = true
	}
	best, top := []string{}, int64(-1)
	for _, s := range scores {
		if !feasible[s.Host] {
			continue
		}
		if s.Score > top {
			best, top = []string{s.Host}, s.Score
		} else if s.Score == top {
			best = append(best, s.Host)
		}
	}
	if len(best) == 0 {
		err = fmt.Errorf("prioritize %s/%s: no score for a feasible node", p.Namespace, p.Name)
		return
	}
	bind, err = json.Marshal(bindingArgs{p.Name, p.Namespace, p.UID, best[c.rng.Intn(len(best))]})
	return
}

// bind binds; a refused bind is scheduled again, as kube-scheduler requeues the pod.
func (c *client) bind(p pod, body []byte, sched *sync.Mutex, retries *int) (time.Duration, error) {
	last := ""
	t0 := time.Now()
	for attempt := 0; attempt < 5; attempt++ {
		var r bindingResult
		_, err := c.post("bind", body, &r)
		if err != nil {
			return 0, err
		}
		if r.Error == "" {
			return time.Since(t0), nil
		}
		last = r.Error
		sched.Lock()
		*retries++
		_, _, body, err = c.schedule(p)
		sched.Unlock()
		if err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("bind %s/%s: refused 5 times, last: %s", p.Namespace, p.Name, last)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func main() {
	requests := flag.String("requests", "", "JSON file of pods and their ExtenderArgs")
	url := flag.String("url", "http://127.0.0.1:8888", "extender base URL (without the prefix)")
	warmup := flag.Int("warmup", 20, "pods scheduled before measuring")
	latency := flag.Int("latency", 300, "pods of the latency phase (one at a time)")
	throughput := flag.Int("throughput", 1000, "pods of the throughput phase")
	workers := flag.Int("bind-workers", 16, "concurrent binds in the throughput phase")
	flag.Parse()

	raw, err := os.ReadFile(*requests)
	if err != nil {
		fail(err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fail(fmt.Errorf("%s: %w", *requests, err))
	}
	if need := *warmup + *latency + *throughput; len(in.Pods) < need {
		fail(fmt.Errorf("%s: %d pods, %d needed", *requests, len(in.Pods), need))
	}
	transport := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: 90 * time.Second}
	c := &client{http: &http.Client{Transport: transport, Timeout: 60 * time.Second}, base: *url + in.Prefix,
		rng: rand.New(rand.NewSource(0))}
	var sched sync.Mutex // one scheduling cycle at a time, as kube-scheduler
	retries, unschedulable := 0, 0
	pods := in.Pods

	for _, p := range pods[:*warmup] {
		_, _, body, err := c.schedule(p)
		if err == nil {
			_, err = c.bind(p, body, &sched, &retries)
		}
		if errors.Is(err, errUnschedulable) {
			unschedulable++
		} else if err != nil {
			fail(err)
		}
	}
	pods = pods[*warmup:]
	lat := map[string][]float64{"filter": {}, "prioritize": {}, "bind": {}}
	for _, p := range pods[:*latency] {
		fd, pd, body, err := c.schedule(p)
		if errors.Is(err, errUnschedulable) {
			unschedulable++
			continue
		} else if err != nil {
			fail(err)
		}
		bd, err := c.bind(p, body, &sched, &retries)
		if errors.Is(err, errUnschedulable) {
			unschedulable++
			continue
		} else if err != nil {
			fail(err)
		}
		lat["filter"] = append(lat["filter"], ms(fd))
		lat["prioritize"] = append(lat["prioritize"], ms(pd))
		lat["bind"] = append(lat["bind"], ms(bd))
	}
	pods = pods[*latency:][:*throughput]

	type job struct {
		p    pod
		body []byte
	}
	jobs := make(chan job, len(pods))
	bindLat := make([]float64, 0, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	t0 := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d, err := c.bind(j.p, j.body, &sched, &retries)
				mu.Lock()
				switch {
				case errors.Is(err, errUnschedulable):
					unschedulable++
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				default:
					bindLat = append(bindLat, ms(d))
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range pods {
		sched.Lock()
		_, _, body, err := c.schedule(p)
		sched.Unlock()
		if errors.Is(err, errUnschedulable) {
			mu.Lock()
			unschedulable++
			mu.Unlock()
			continue
		} else if err != nil {
			fail(err)
		}
		jobs <- job{p, body}
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(t0).Seconds()
	if firstErr != nil {
		fail(firstErr)
	}
	out, _ := json.Marshal(map[string]any{"latency_ms": lat, "throughput_wall_s": wall,
		"bind_ms_under_load": bindLat, "binds_refused_and_rescheduled": retries, "unschedulable": unschedulable})
	os.Stdout.Write(append(out, '\n'))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "extenderload:", err)
	os.Exit(1)
}
