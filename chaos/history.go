package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// History is everything a run recorded, with wall-clock timestamps of this machine (the service runs on
// the same machine, so its occurred_at stamps are on the same clock). The invariants are checked on it
// offline, after the run: a saved history can be checked again with Check.
type History struct {
	Params  Params    `json:"params"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`

	Modules      []ModuleInfo  `json:"modules"`
	Requests     []Request     `json:"requests"`     // every request of every module, poller, prober and chaos call
	Faults       []Fault       `json:"faults"`       // every fault injected, with its window
	Silences     []Silence     `json:"silences"`     // when the suite deliberately kept a module quiet
	Incarnations []Incarnation `json:"incarnations"` // every run of the service process
	Audit        []AuditEvent  `json:"audit"`        // every audit event the poller saw, with when it first saw it
	Alerts       []AlertRecv   `json:"alerts"`       // every webhook delivery received
	Skills       []SkillsScan  `json:"skills"`       // periodic and checkpoint scans of skill consistency
	Stalls       []StallLog    `json:"stalls"`       // "monitor stalled" lines of the service's log (the self-health guard)
	Final        FinalState    `json:"final"`        // the database after the run
	Phases       []PhaseMark   `json:"phases"`       // when each phase of the schedule began
	Notes        []string      `json:"notes"`        // what the suite itself noticed (setup, slow steps)

	// Cluster schedules only (Params.Nodes > 0).
	Nodes  []NodeInfo `json:"nodes,omitempty"`  // every node slot of the cluster
	Writes []Write    `json:"writes,omitempty"` // the fence and owner of every audit event, recorded in its transaction
}

// NodeInfo is one node slot of a cluster schedule: its incarnations share the name and the addresses.
type NodeInfo struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`         // n1, n2, ...
	ClusterAddr string `json:"cluster_addr"` // MCPFLEET_CLUSTER_ADDR, the node name it claims shards under
	URL         string `json:"url"`
}

// Write is what the suite's trigger on audit_events recorded in the transaction that inserted an event
// (cluster schedules): the fence the writing command carried (persistence.WithFence sets mcpfleet.fence to
// "shard:epoch"; empty: the write was not fenced), the node process that wrote it (the mcpfleet.node
// setting the suite gives each incarnation's connections), and the row of shard_owners for the event's
// server's shard as that transaction saw it, locked FOR SHARE so no claim can commit between the read and
// the write's commit.
type Write struct {
	EventID    string    `json:"event_id"`
	ServerID   string    `json:"server_id"`
	Shard      int       `json:"shard"` // computed by the trigger (FNV-1a in SQL); checked against shard.Of
	Fence      string    `json:"fence"`
	Writer     string    `json:"writer"` // "<node name>.<incarnation>"
	OwnerNode  string    `json:"owner_node"`
	OwnerEpoch int64     `json:"owner_epoch"`
	At         time.Time `json:"at"`
}

// PhaseMark is the beginning of a phase of the schedule.
type PhaseMark struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

// Params are the settings the checks depend on.
type Params struct {
	Schedule         string        `json:"schedule"`
	Heartbeat        time.Duration `json:"heartbeat"`                // H
	Monitor          time.Duration `json:"monitor"`                  // the monitor period
	WriteTimeout     time.Duration `json:"write_timeout"`            // MCPFLEET_WRITE_TIMEOUT
	ReconcileEvery   time.Duration `json:"reconcile_every"`          // the skills reconciliation period of the service
	FlapWindow       time.Duration `json:"flap_window"`              // the flapping window of the service
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`        // the modules' client timeout for a heartbeat
	CommandTimeout   time.Duration `json:"command_timeout"`          // the client timeout of register and deregister
	Tolerance        time.Duration `json:"tolerance"`                // slack of the liveness bound (see Check)
	EarlyTolerance   time.Duration `json:"early_tolerance"`          // slack of the no-early-unhealthy bound
	Nodes            int           `json:"nodes,omitempty"`          // cluster schedules: the nodes at the start (0: one process, no cluster)
	FailoverBound    time.Duration `json:"failover_bound,omitempty"` // cluster: a topology change to every shard owned again (docs/cluster.md)
}

// ModuleInfo is one simulated module.
type ModuleInfo struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	ServerID string `json:"server_id"` // from its first acknowledged registration
	Churn    bool   `json:"churn"`     // deregisters and registers again during the run
}

// Request kinds.
const (
	ReqRegister   = "register"
	ReqHeartbeat  = "heartbeat"
	ReqDeregister = "deregister"
	ReqAudit      = "audit"
	ReqReadyz     = "readyz"
	ReqChaos      = "chaos"
)

// Request is one HTTP request and its outcome.
type Request struct {
	Kind     string    `json:"k"`
	Module   int       `json:"m"`             // module index; -1 for the suite's own requests
	ServerID string    `json:"sid,omitempty"` // the server it was about (heartbeat, deregister) or got (register)
	Sent     time.Time `json:"s"`
	Done     time.Time `json:"d"`            // when the answer (or the error) came
	Code     int       `json:"c"`            // HTTP status; 0 when there was no answer
	Err      string    `json:"e,omitempty"`  // transport error, shortened
	Timeout  bool      `json:"to,omitempty"` // no answer: the client gave up waiting
	Status   string    `json:"st,omitempty"` // the server status in the answer (register, heartbeat) or /readyz's status
	Problem  string    `json:"p,omitempty"`  // the problem slug of an error answer
	Retry    string    `json:"ra,omitempty"` // Retry-After of an error answer
	Detail   string    `json:"dt,omitempty"` // problem detail (shortened) for the report
	Created  bool      `json:"new,omitempty"`
	Events   int       `json:"n,omitempty"` // audit: events in the page
	Inc      int       `json:"inc"`         // the service incarnation current when it was sent
	Phase    string    `json:"ph,omitempty"`
	Node     int       `json:"nd,omitempty"` // cluster: the index of the node it was sent to
	Conn     string    `json:"cn,omitempty"` // no answer: the connection it went out on (describeConn)
}

// Accepted reports whether the request got a 2xx answer.
func (r *Request) Accepted() bool { return r.Code >= 200 && r.Code < 300 }

// Fault kinds, as counted in the report.
const (
	FaultServerPanic  = "server actor panic"
	FaultServerStop   = "server actor stop"
	FaultServerPoison = "server actor poison"
	FaultWriterPanic  = "writer panic"
	FaultStamperPanic = "stamper panic"
	FaultAlertsPanic  = "alerts panic"
	FaultKill9        = "kill -9 + restart"
	FaultDBStop       = "PostgreSQL stopped"
	FaultDBRestart    = "PostgreSQL restart"
	FaultSigstop      = "SIGSTOP > 3H + SIGCONT"
	FaultDrop10       = "drop 10% heartbeats"
	FaultDrop60       = "drop 60% heartbeats"
	FaultDrop100      = "drop 100% heartbeats"
	FaultWebhookFlaky = "webhook failing 30%"
	FaultChurn        = "deregister + register"

	// Cluster schedules: Target names the node.
	FaultNodeKill9   = "node kill -9 + restart"
	FaultNodeSigstop = "node SIGSTOP > etcd lease + SIGCONT"
	FaultNodeCut     = "node's network cut > etcd lease + restored"
	FaultEtcdStop    = "etcd stopped"
	FaultNodeAdd     = "node added"
)

// Fault is one injected fault and its window [Start, End]: for a kill -9, from the signal to the new
// process being ready; for PostgreSQL, from the stop command to the server accepting connections; for
// SIGSTOP, from SIGSTOP to SIGCONT; for a drop, the silence; for an actor crash, the instant of the call.
type Fault struct {
	Kind     string    `json:"kind"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Target   string    `json:"target,omitempty"` // server id, or how many modules
	Phase    string    `json:"phase"`
	Survived bool      `json:"survived"` // the service answered /readyz and heartbeats again afterwards
	Detail   string    `json:"detail,omitempty"`
}

// Silence reasons.
const (
	SilenceDrop       = "drop"         // a drop fault
	SilenceDeregister = "deregistered" // the module deregistered itself (churn)
)

// Silence is a period during which the suite kept a module from heartbeating on purpose. End is zero
// when it lasted to the end of the run.
type Silence struct {
	Module int       `json:"module"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Reason string    `json:"reason"`
	Phase  string    `json:"phase"`
}

// Incarnation is one run of the service process.
type Incarnation struct {
	N        int       `json:"n"`
	PID      int       `json:"pid"`
	Start    time.Time `json:"start"`     // exec
	Ready    time.Time `json:"ready"`     // first answer of /readyz with the database ok
	StopSent time.Time `json:"stop_sent"` // when the suite sent the signal that ended it (zero: none)
	Signal   string    `json:"signal"`    // what the suite sent: "SIGKILL", "SIGTERM" or ""
	End      time.Time `json:"end"`       // exit observed
	Exit     string    `json:"exit"`      // "exit status 0", "signal: killed", ...
	ExitCode int       `json:"exit_code"` // -1 when ended by a signal
	Log      string    `json:"log"`       // path of its stderr
	Node     int       `json:"node"`      // cluster: the node slot it ran in
}

// Window is a time interval [Start, End].
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// AuditEvent is an audit event as the API (or, at the end, the database) returned it.
type AuditEvent struct {
	EventID    string    `json:"event_id"`
	Seq        int64     `json:"seq"`
	Kind       string    `json:"kind"`
	ServerID   string    `json:"server_id"`
	ModuleName string    `json:"module_name"`
	Status     string    `json:"status"`
	From       string    `json:"from,omitempty"`
	OccurredAt time.Time `json:"occurred_at"`
	FirstSeen  time.Time `json:"first_seen"` // when the poller first saw it (zero: only in the final read)
}

// AlertRecv is one delivery received by the suite's webhook.
type AlertRecv struct {
	At          time.Time `json:"at"`
	HeaderID    string    `json:"header_event_id"`
	EventID     string    `json:"event_id"`
	Kind        string    `json:"kind"`
	ServerID    string    `json:"server_id"`
	Status      string    `json:"status"`
	OccurredAt  time.Time `json:"occurred_at"`
	SignatureOK bool      `json:"signature_ok"`
	Answered    int       `json:"answered"` // what the webhook answered (503 while flaky)
	BodyError   string    `json:"body_error,omitempty"`
}

// SkillsScan is one read of skill consistency from the database: every server whose skills disagree
// with its status (available exactly when the server is healthy or degraded and the skill is not
// orphaned).
type SkillsScan struct {
	At         time.Time       `json:"at"`
	Checkpoint string          `json:"checkpoint,omitempty"` // set when taken after a fault settled
	OK         bool            `json:"ok"`                   // the database answered
	Servers    int             `json:"servers"`              // servers with skills examined
	Bad        []SkillMismatch `json:"bad,omitempty"`
}

// SkillMismatch is a server whose skills disagree with its status.
type SkillMismatch struct {
	ServerID string `json:"server_id"`
	Status   string `json:"status"`
	Bad      int    `json:"bad"` // how many of its skills disagree
}

// StallLog is one "monitor stalled" line of the service's log.
type StallLog struct {
	At    time.Time     `json:"at"`
	Stall time.Duration `json:"stall"`
	Inc   int           `json:"inc"`
}

// FinalState is what the database holds after the run.
type FinalState struct {
	Read    bool               `json:"read"`
	Servers []FinalServer      `json:"servers"`
	Audit   []AuditEvent       `json:"audit"`
	Outbox  []OutboxRow        `json:"outbox"`
	Skills  SkillsScan         `json:"skills"`
	Counts  map[string]int     `json:"counts"`
	Extra   map[string]float64 `json:"extra,omitempty"`
}

// FinalServer is a row of mcp_servers.
type FinalServer struct {
	ServerID   string `json:"server_id"`
	ModuleName string `json:"module_name"`
	Status     string `json:"status"`
}

// OutboxRow is a row of alert_outbox.
type OutboxRow struct {
	EventID   string `json:"event_id"`
	ServerID  string `json:"server_id"`
	Kind      string `json:"kind"`
	Delivered bool   `json:"delivered"`
	Attempts  int    `json:"attempts"`
}

// Save writes h as JSON to path.
func (h *History) Save(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("save history: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("save history: %w", err)
	}
	return nil
}

// LoadHistory reads a history saved by Save.
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("load history %s: %w", path, err)
	}
	return &h, nil
}
