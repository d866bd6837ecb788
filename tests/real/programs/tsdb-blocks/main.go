// tsdb-blocks writes the samples of the series it reads (JSON lines on stdin) into one TSDB block
// under the directory it is given, as Prometheus's own scrapes would have stored them: a sample
// whose value is null is a staleness marker (value.StaleNaN), which Prometheus writes when a
// series leaves a target's scrape. promtool's openmetrics backfill cannot write those, and
// without them a query sees a series that ended five minutes longer (the lookback delta).
//
//	{"labels": {"__name__": "up", "job": "x"}, "samples": [[1700000000000, 1], [1700000030000, null]]}
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb"
)

type series struct {
	Labels  map[string]string `json:"labels"`
	Samples [][2]*float64     `json:"samples"`
}

type sample struct {
	labels labels.Labels
	t      int64
	v      float64
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tsdb-blocks <output dir> < series.jsonl")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string) error {
	var all []sample
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		var s series
		if err := json.Unmarshal(scanner.Bytes(), &s); err != nil {
			return fmt.Errorf("line %q: %w", scanner.Text(), err)
		}
		lbls := labels.FromMap(s.Labels)
		for _, pair := range s.Samples {
			if pair[0] == nil {
				return fmt.Errorf("series %v: a sample without a timestamp", lbls)
			}
			v := math.Float64frombits(value.StaleNaN)
			if pair[1] != nil {
				v = *pair[1]
			}
			all = append(all, sample{lbls, int64(*pair[0]), v})
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	// The head takes a sample only up to half a block older than the newest one it holds: in time
	// order, with a block as long as the whole span.
	sort.SliceStable(all, func(i, j int) bool { return all[i].t < all[j].t })
	span := int64(2 * 3600 * 1000)
	if len(all) > 0 {
		span = max(span, 2*(all[len(all)-1].t-all[0].t+1))
	}
	writer, err := tsdb.NewBlockWriter(promslog.NewNopLogger(), dir, span)
	if err != nil {
		return err
	}
	defer writer.Close()
	ctx := context.Background()
	app := writer.Appender(ctx)
	for _, s := range all {
		if _, err := app.Append(0, s.labels, s.t, s.v); err != nil {
			return fmt.Errorf("append %v at %d: %w", s.labels, s.t, err)
		}
	}
	if err := app.Commit(); err != nil {
		return err
	}
	id, err := writer.Flush(ctx)
	if err != nil {
		return err
	}
	fmt.Println(id.String())
	return nil
}
