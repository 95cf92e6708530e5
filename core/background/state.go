package background

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// State is what `silas doctor` shows of River: the leader, the queues and
// the jobs that need a look.
type State struct {
	// Leader is the River client id of the elected leader ("" when none:
	// no `silas serve` runs, or it stopped less than a few seconds ago).
	Leader        string
	LeaderElected time.Time
	Queues        []QueueState
	// Stuck are jobs running longer than the threshold given to ReadState
	// (their process may have died; River's rescuer retries or discards
	// them after an hour), then jobs that failed in the last day,
	// newest first.
	Stuck []JobState
}

// QueueState is one queue's backlog.
type QueueState struct {
	Name      string
	Paused    bool
	Available int64 // waiting to be worked
	Running   int64
	// Seen is when a client working the queue last reported in.
	Seen time.Time
}

// JobState is one job that needs a look.
type JobState struct {
	ID    int64
	Kind  string
	Queue string
	State rivertype.JobState
	// At is when it started running (running) or finished (failed).
	At time.Time
	// Error is the last attempt's error ("" when none).
	Error string
}

// ReadState reads River's state on pool (any role with SELECT on River's
// tables). stuckAfter is how long a job may run before it is listed.
func ReadState(ctx context.Context, pool *pgxpool.Pool, now time.Time, stuckAfter time.Duration) (State, error) {
	var st State
	driver := riverpgxv5.New(pool)
	exec := driver.GetExecutor()
	leader, err := exec.LeaderGetElectedLeader(ctx, &riverdriver.LeaderGetElectedLeaderParams{})
	switch {
	case errors.Is(err, rivertype.ErrNotFound):
	case err != nil:
		return st, fmt.Errorf("background: river leader: %w", err)
	case leader.ExpiresAt.After(now):
		st.Leader, st.LeaderElected = leader.LeaderID, leader.ElectedAt
	}
	queues, err := exec.QueueList(ctx, &riverdriver.QueueListParams{Max: 100})
	if err != nil {
		return st, fmt.Errorf("background: river queues: %w", err)
	}
	names := make([]string, len(queues))
	for i, q := range queues {
		names[i] = q.Name
		st.Queues = append(st.Queues, QueueState{Name: q.Name, Paused: q.PausedAt != nil, Seen: q.UpdatedAt})
	}
	if len(names) > 0 {
		counts, err := exec.JobCountByQueueAndState(ctx, &riverdriver.JobCountByQueueAndStateParams{QueueNames: names})
		if err != nil {
			return st, fmt.Errorf("background: river job counts: %w", err)
		}
		for _, c := range counts {
			if i := slices.IndexFunc(st.Queues, func(q QueueState) bool { return q.Name == c.Queue }); i >= 0 {
				st.Queues[i].Available, st.Queues[i].Running = c.CountAvailable, c.CountRunning
			}
		}
	}
	// An insert-only client: listing needs no workers and starts nothing.
	client, err := river.NewClient(driver, &river.Config{})
	if err != nil {
		return st, fmt.Errorf("background: river client: %w", err)
	}
	running, err := client.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateRunning).
		OrderBy(river.JobListOrderByTime, river.SortOrderAsc).First(50))
	if err != nil {
		return st, fmt.Errorf("background: river running jobs: %w", err)
	}
	for _, j := range running.Jobs {
		if j.AttemptedAt != nil && now.Sub(*j.AttemptedAt) >= stuckAfter {
			st.Stuck = append(st.Stuck, jobState(j, *j.AttemptedAt))
		}
	}
	failed, err := client.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateDiscarded, rivertype.JobStateRetryable).
		OrderBy(river.JobListOrderByTime, river.SortOrderDesc).First(20))
	if err != nil {
		return st, fmt.Errorf("background: river failed jobs: %w", err)
	}
	for _, j := range failed.Jobs {
		at := j.CreatedAt
		if j.FinalizedAt != nil {
			at = *j.FinalizedAt
		} else if j.AttemptedAt != nil {
			at = *j.AttemptedAt
		}
		if now.Sub(at) <= 24*time.Hour {
			st.Stuck = append(st.Stuck, jobState(j, at))
		}
	}
	return st, nil
}

func jobState(j *rivertype.JobRow, at time.Time) JobState {
	s := JobState{ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: j.State, At: at}
	if n := len(j.Errors); n > 0 {
		s.Error = j.Errors[n-1].Error
	}
	return s
}
