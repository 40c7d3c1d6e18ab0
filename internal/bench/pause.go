package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Pause measures paused sessions (issue 28's goals) on the warm daemon: a
// session whose interpreter holds a ~200 MB pandas DataFrame is paused
// (POST .../pause, timed by the client), the daemon's RSS is read while it
// is paused, and its next call, df.shape, restores it (timed by the client
// and by the daemon's restore_ms). A fresh session each round: a session
// pauses once on the hosts measured (docs/API.md).
type Pause struct {
	Rounds int `json:"rounds"`
	// CheckpointBytes is the size of one checkpoint on disk (the last).
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	Pause           Stat  `json:"pause"`
	NextCall        Stat  `json:"next_call_df_shape"`
	Restore         Stat  `json:"restore_ms"`
	// RSSDeltaBytes is the daemon's RSS while the session is paused
	// minus before the pause (the median round): what the daemon itself
	// holds for a paused session; its jail's memory is gone.
	RSSDeltaBytes int64 `json:"daemon_rss_delta_bytes"`
	// Fork: the same session forked into 4 (POST .../fork, timed by the
	// client: every child restored and reseeded), then each child's first
	// call (df.shape) and the parent's next call.
	ForkRounds     int  `json:"fork_rounds"`
	Fork           Stat `json:"fork_into_4"`
	ChildFirstCall Stat `json:"child_first_call"`
	ParentNextCall Stat `json:"parent_next_call"`
	// Snapshot and Rollback: a snapshot of that session taken, and the
	// session rolled back to it (POST .../restore), timed by the client.
	Snapshot Stat `json:"snapshot"`
	Rollback Stat `json:"rollback"`
	// Restart: sessions with state (half of them paused, half idle) across
	// a stop (SIGTERM) and a start of the daemon; how many answered their
	// next call with their state, and the stop's and the start's time.
	RestartSessions int     `json:"restart_sessions"`
	RestartAnswered int     `json:"restart_answered"`
	StopMs          float64 `json:"stop_ms"`
	StartMs         float64 `json:"start_ms"`
	// Unavailable says why nothing was measured (this host cannot pause).
	Unavailable string `json:"unavailable,omitempty"`
}

// dataFrame200MB makes a DataFrame of 3.3 M rows × 8 float64 columns
// (211 MB) in the session.
const dataFrame200MB = "import numpy as np, pandas as pd\ndf = pd.DataFrame(np.random.default_rng(1).random((3_300_000, 8)))\ndf.shape"

func (b *bench) pause() error {
	fmt.Fprintln(b.log, "paused sessions: a 200 MB DataFrame")
	d := b.warm
	rounds := min(b.cfg.Iter, 8)
	var pauses, calls, restores []float64
	var deltas []int64
	for i := 0; i < rounds; i++ {
		id, err := d.createSessionWith(`{"limits": {"memory_mb": 1024}}`)
		if err != nil {
			return err
		}
		if err := d.sessionCall(id, dataFrame200MB); err != nil {
			d.deleteSession(id)
			return err
		}
		rssBefore := procStatus(d.Pid(), "VmRSS:")
		start := time.Now()
		took, bytesOnDisk, err := d.pauseSession(id)
		if err != nil {
			d.deleteSession(id)
			if strings.Contains(err.Error(), "HTTP 503") {
				b.rep.Pause.Unavailable = err.Error()
				return nil
			}
			return err
		}
		pauses = append(pauses, ms(time.Since(start)))
		_ = took
		deltas = append(deltas, int64(procStatus(d.Pid(), "VmRSS:"))-int64(rssBefore))
		b.rep.Pause.CheckpointBytes = bytesOnDisk
		start = time.Now()
		restore, err := d.sessionCallResumed(id, "df.shape")
		if err != nil {
			d.deleteSession(id)
			return err
		}
		calls = append(calls, ms(time.Since(start)))
		restores = append(restores, restore)
		d.deleteSession(id)
		d.waitReady(b.ctx)
	}
	b.rep.Pause.Rounds = rounds
	b.rep.Pause.Pause, b.rep.Pause.NextCall, b.rep.Pause.Restore = stats(pauses), stats(calls), stats(restores)
	slices.Sort(deltas)
	b.rep.Pause.RSSDeltaBytes = deltas[len(deltas)/2]
	if err := b.fork(min(rounds, 3)); err != nil {
		return err
	}
	return b.restart()
}

// fork forks a DataFrame session into 4, rounds times.
func (b *bench) fork(rounds int) error {
	fmt.Fprintln(b.log, "forks: a 200 MB DataFrame session into 4")
	d := b.warm
	var forks, firsts, parents, snaps, rollbacks []float64
	for range rounds {
		id, err := d.createSessionWith(`{"limits": {"memory_mb": 1024}}`)
		if err != nil {
			return err
		}
		if err := d.sessionCall(id, dataFrame200MB); err != nil {
			d.deleteSession(id)
			return err
		}
		start := time.Now()
		kids, err := d.forkSession(id, 4)
		if err != nil {
			d.deleteSession(id)
			return err
		}
		forks = append(forks, ms(time.Since(start)))
		start = time.Now()
		if err := d.sessionCall(id, "df.shape"); err != nil {
			return err
		}
		parents = append(parents, ms(time.Since(start)))
		for _, k := range kids {
			start = time.Now()
			if err := d.sessionCall(k, "df.shape"); err != nil {
				return err
			}
			firsts = append(firsts, ms(time.Since(start)))
			d.deleteSession(k)
		}
		start = time.Now()
		snap, err := d.postJSON("/v1/sessions/"+id+"/snapshots", "", http.StatusCreated, "snapshot_id")
		if err != nil {
			return err
		}
		snaps = append(snaps, ms(time.Since(start)))
		if err := d.sessionCall(id, "df['x'] = 1"); err != nil {
			return err
		}
		start = time.Now()
		if _, err := d.postJSON("/v1/sessions/"+id+"/restore", `{"snapshot_id": "`+snap+`"}`, http.StatusOK, ""); err != nil {
			return err
		}
		rollbacks = append(rollbacks, ms(time.Since(start)))
		if err := d.sessionCall(id, "assert 'x' not in df"); err != nil {
			return fmt.Errorf("after the rollback: %w", err)
		}
		d.del("/v1/snapshots/" + snap)
		d.deleteSession(id)
		d.waitReady(b.ctx)
	}
	b.rep.Pause.ForkRounds = rounds
	b.rep.Pause.Fork, b.rep.Pause.ChildFirstCall, b.rep.Pause.ParentNextCall = stats(forks), stats(firsts), stats(parents)
	b.rep.Pause.Snapshot, b.rep.Pause.Rollback = stats(snaps), stats(rollbacks)
	return nil
}

// postJSON sends body (JSON; "" for none) to path and wants status; it
// returns the string field of the answer named field ("" for none).
func (d *daemon) postJSON(path, body string, status int, field string) (string, error) {
	resp, err := d.Client.Post("http://jaild"+path, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if resp.StatusCode != status || json.Unmarshal(b, &m) != nil {
		return "", fmt.Errorf("POST %s: HTTP %d: %.300s", path, resp.StatusCode, b)
	}
	if field == "" {
		return "", nil
	}
	v, _ := m[field].(string)
	if v == "" {
		return "", fmt.Errorf("POST %s: no %s: %.300s", path, field, b)
	}
	return v, nil
}

// del sends a DELETE to path.
func (d *daemon) del(path string) {
	req, _ := http.NewRequest(http.MethodDelete, "http://jaild"+path, nil)
	if resp, err := d.Client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// restart stops (SIGTERM) and starts the warm daemon with 4 sessions,
// 2 paused and 2 idle, each holding a value of its own, and counts those
// that answer their next call with it.
func (b *bench) restart() error {
	fmt.Fprintln(b.log, "paused sessions across a restart of the daemon")
	d := b.warm
	var ids []string
	for i := range 4 {
		id, err := d.createSession()
		if err != nil {
			return err
		}
		ids = append(ids, id)
		if err := d.sessionCall(id, fmt.Sprintf("mine = %d", 1000+i)); err != nil {
			return err
		}
		if i%2 == 0 {
			if _, _, err := d.pauseSession(id); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	if err := d.StopProcess(syscall.SIGTERM); err != nil {
		return err
	}
	b.rep.Pause.StopMs = ms(time.Since(start))
	start = time.Now()
	if err := d.Start(); err != nil {
		return err
	}
	b.rep.Pause.StartMs = ms(time.Since(start))
	b.rep.Pause.RestartSessions = len(ids)
	for i, id := range ids {
		if _, err := d.sessionCallResumed(id, fmt.Sprintf("assert mine == %d", 1000+i)); err == nil {
			b.rep.Pause.RestartAnswered++
		} else {
			fmt.Fprintf(b.log, "  session %s after the restart: %v\n", id, err)
		}
		d.deleteSession(id)
	}
	d.waitReady(b.ctx)
	return nil
}

// forkSession forks id into n and returns the children's ids.
func (d *daemon) forkSession(id string, n int) ([]string, error) {
	resp, err := d.Client.Post("http://jaild/v1/sessions/"+id+"/fork", "application/json", strings.NewReader(fmt.Sprintf(`{"count": %d}`, n)))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Sessions []struct {
			ID string `json:"session_id"`
		} `json:"sessions"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || len(r.Sessions) != n {
		return nil, fmt.Errorf("fork: HTTP %d: %.300s", resp.StatusCode, b)
	}
	ids := make([]string, n)
	for i, s := range r.Sessions {
		ids[i] = s.ID
	}
	return ids, nil
}

// stats is the percentiles of ds (ms), as measureAfter gives them.
func stats(ds []float64) Stat {
	slices.Sort(ds)
	pct := func(p float64) float64 { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return Stat{P50: pct(0.50), P95: pct(0.95), P99: pct(0.99)}
}

func (d *daemon) pauseSession(id string) (tookMs float64, bytesOnDisk int64, err error) {
	resp, err := d.Client.Post("http://jaild/v1/sessions/"+id+"/pause", "application/json", nil)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		TookMs  float64 `json:"took_ms"`
		Session struct {
			State       string `json:"state"`
			PausedBytes int64  `json:"paused_bytes"`
		} `json:"session"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Session.State != "paused" {
		return 0, 0, fmt.Errorf("pause: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return r.TookMs, r.Session.PausedBytes, nil
}

// sessionCallResumed runs code in a paused session and returns the
// daemon's restore_ms; the call must say it resumed.
func (d *daemon) sessionCallResumed(id, code string) (float64, error) {
	body, _ := json.Marshal(map[string]string{"code": code})
	resp, err := d.Client.Post("http://jaild/v1/sessions/"+id+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status  string `json:"status"`
		Session struct {
			Resumed   bool    `json:"resumed"`
			RestoreMs float64 `json:"restore_ms"`
		} `json:"session"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Status != "ok" || !r.Session.Resumed {
		return 0, fmt.Errorf("call after the pause: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return r.Session.RestoreMs, nil
}

func (p Pause) table(b *strings.Builder) {
	if p.Unavailable != "" {
		fmt.Fprintf(b, "\nPaused sessions: not measured, this host cannot pause them (%s).\n", p.Unavailable)
		return
	}
	if p.Rounds == 0 {
		return
	}
	fmt.Fprintf(b, "\nPaused sessions (a 200 MB pandas DataFrame in the interpreter; ms, p50 / p95 / p99; %d rounds): pause %s; its next call, `df.shape`, %s, of which the restore %s; checkpoint %.0f MB on disk; the daemon's RSS while it is paused %+.1f MiB (the jail's memory is gone).\n",
		p.Rounds, stat(p.Pause), stat(p.NextCall), stat(p.Restore), float64(p.CheckpointBytes)/1e6, float64(p.RSSDeltaBytes)/(1<<20))
	if p.ForkRounds > 0 {
		fmt.Fprintf(b, "\nFork of that session into 4 (%d rounds; ms, p50 / p95 / p99): the fork, every child restored and reseeded, %s; a child's first call, `df.shape`, %s; the parent's next call %s. A snapshot of it %s; its rollback to the snapshot %s.\n",
			p.ForkRounds, stat(p.Fork), stat(p.ChildFirstCall), stat(p.ParentNextCall), stat(p.Snapshot), stat(p.Rollback))
	}
	if p.RestartSessions > 0 {
		fmt.Fprintf(b, "\nAcross a restart (SIGTERM, then a start; %d sessions, half paused, half idle): %d answered their next call with their state; the stop took %.0f ms (the idle ones paused), the start %.0f ms.\n",
			p.RestartSessions, p.RestartAnswered, p.StopMs, p.StartMs)
	}
}
