package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

// MCP tasks (docs/gateway.md, "Tasks"). A write that outlives
// respond_within and a plan that waits for a person become a task that the
// client polls, when the client asks for tasks: the Tasks extension of
// 2026-07-28 (io.modelcontextprotocol/tasks, declared in the request's
// _meta client capabilities; the server decides) and the experimental
// tasks of 2025-11-25 (a task-augmented tools/call: params.task). A task
// is stored (airlock_tasks), unique on the principal and the work, and its
// status is read from the record or plan on every poll, so every replica
// answers for it and a restart loses nothing.

// ExtTasks is the Tasks extension's identifier (2026-07-28).
const ExtTasks = "io.modelcontextprotocol/tasks"

// metaTaskRequest carries a 2025-11-25 tools/call's params.task past the
// SDK (whose CallToolParams has no such field): the edge moves it into
// _meta.
const metaTaskRequest = "io.airlock/task"

// metaRelatedTask names the task a 2025-11-25 tasks/result belongs to.
const metaRelatedTask = "io.modelcontextprotocol/related-task"

// metaNote carries what airlock adds to an empty acknowledgement.
const metaNote = "io.airlock/note"

// JSON-RPC codes of the task methods.
const (
	rpcMissingCapability = -32021 // 2026-07-28: Missing Required Client Capability
)

// Poll intervals suggested to clients: a call is answered in seconds, a
// person decides in minutes.
const (
	pollRecordMs = 1000
	pollPlanMs   = 5000
)

// Task statuses on the wire.
const (
	taskWorking   = "working"
	taskCompleted = "completed"
	taskCancelled = "cancelled"
)

// taskFlavor is how a client speaks tasks.
type taskFlavor int

const (
	taskNone taskFlavor = iota
	taskV1              // 2025-11-25: params.task, the Task nested under "task"
	taskV2              // 2026-07-28 extension: flat CreateTaskResult, resultType
)

// declaresTasks says whether a request's _meta declares the Tasks extension
// among its client capabilities.
func declaresTasks(meta map[string]any) bool {
	caps, _ := meta[metaClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[ExtTasks]
	return ok
}

// callFlavor is how a tools/call asks for a task, if it does.
func callFlavor(req *mcp.CallToolRequest) taskFlavor {
	if req == nil || req.Params == nil {
		return taskNone
	}
	if declaresTasks(req.Params.Meta) {
		return taskV2
	}
	if _, ok := req.Params.Meta[metaTaskRequest]; ok && !newRevision(req.Session) {
		// 2025-11-25's params.task; a 2026-07-28 request's is ignored (the
		// extension is declared, never asked for per call).
		return taskV1
	}
	return taskNone
}

// newRevision says whether a session speaks 2026-07-28 or later.
func newRevision(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion >= firstStatelessRevision
}

// callSlot is where a tool handler leaves its answer for the tools/call
// middleware, which may turn it into a task.
type callSlot struct {
	answer    *airlock.Answer
	principal string
	tool      string // the tool called (plan_T for a plan)
}

type callSlotKey struct{}

func slotFrom(ctx context.Context) *callSlot {
	s, _ := ctx.Value(callSlotKey{}).(*callSlot)
	return s
}

// taskable says whether a tool called by this name may become a task:
// writes and plan_T.
func (g *Gateway) taskable(name string) bool {
	r := g.routes[name]
	return r != nil && r.taskable()
}

// unfinished says whether an answer's work is still to end: a call under
// way or in doubt, a plan not yet decided or carried out.
func unfinished(a *airlock.Answer) bool {
	switch a.Status {
	case airlock.StatusInProgress, airlock.StatusInDoubt:
		return true
	case airlock.StatusPlanned:
		return a.Plan != nil && !a.Plan.Status.Final()
	}
	return false
}

// taskForCall answers a tools/call with a task where the client asked for
// tasks and the work has not ended (2026-07-28), or asked for this call to
// be a task (2025-11-25); otherwise it returns res unchanged.
func (g *Gateway) taskForCall(ctx context.Context, req *mcp.CallToolRequest, slot *callSlot, res mcp.Result) (mcp.Result, error) {
	flavor := callFlavor(req)
	a := slot.answer
	if flavor == taskNone || a == nil || !g.taskable(slot.tool) || (flavor == taskV2 && !unfinished(a)) {
		return res, nil
	}
	if a.Plan == nil && a.Key == "" {
		return res, nil
	}
	t, err := g.makeTask(ctx, slot)
	if err != nil {
		// The call's own answer still says what happened.
		g.log.Warn("airlock: could not make a task; answering without one", "tool", slot.tool, "err", err)
		return res, nil
	}
	v, err := g.viewTask(ctx, t)
	if err != nil {
		return nil, err
	}
	if flavor == taskV2 {
		body := v.wireV2()
		body["resultType"] = "task"
		return &rawResult{fields: body}, nil
	}
	return &rawResult{fields: map[string]any{"task": v.wireV1()}}, nil
}

// makeTask stores the task of a call's answer, or finds the one its
// principal already has for the same work.
func (g *Gateway) makeTask(ctx context.Context, slot *callSlot) (*airlock.Task, error) {
	now := g.clock.Now().UTC()
	keep := g.m.Retention.RecordsOr()
	t := &airlock.Task{ID: airlock.NewTaskID(), Principal: slot.principal, Repeat: slot.answer.Repeat, CreatedAt: now}
	if p := slot.answer.Plan; p != nil {
		t.Tool, t.PlanID = p.Tool, p.ID
		t.ExpiresAt = later(p.ExpiresAt, now).Add(keep)
	} else {
		rec, err := g.store.Get(ctx, slot.answer.Key)
		if err != nil {
			return nil, err
		}
		t.Tool, t.RecordKey, t.ExpiresAt = rec.Tool, rec.Key, rec.ExpiresAt
		if !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now) {
			t.ExpiresAt = now.Add(keep)
		}
	}
	stored, _, err := g.store.CreateTask(ctx, t)
	return stored, err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// taskView is a task as it stands: its status read from its record or plan.
type taskView struct {
	task    *airlock.Task
	status  string
	message string
	updated time.Time
	pollMs  int
	// result is the call's result once the task completed: the first
	// result, as a repeat would get it.
	result *mcp.CallToolResult
	// plan is the plan a plan task follows.
	plan *airlock.Plan
}

func (v *taskView) terminal() bool { return v.status == taskCompleted || v.status == taskCancelled }

// viewTask reads where a task's work stands.
func (g *Gateway) viewTask(ctx context.Context, t *airlock.Task) (*taskView, error) {
	v := &taskView{task: t, pollMs: pollRecordMs}
	// The work may have moved last before the task was made.
	defer func() { v.updated = later(v.updated, t.CreatedAt) }()
	if t.PlanID != "" {
		v.pollMs = pollPlanMs
		if g.plans == nil {
			return nil, errors.New("plans are not enabled on this server")
		}
		p, err := g.plans.Get(ctx, t.PlanID)
		if err != nil {
			return nil, err
		}
		v.plan, v.updated = p, p.UpdatedAt
		a := g.planAnswer(p, t.Repeat)
		switch p.Status {
		case airlock.PlanWithdrawn:
			v.status, v.message = taskCancelled, "The plan was withdrawn before anyone decided it; it will not be done."
		case airlock.PlanAwaitingApproval:
			v.status, v.message = taskWorking, taskMessageAwaiting
		case airlock.PlanApproved, airlock.PlanCommitting:
			v.status, v.message = taskWorking, taskMessageApproved
		case airlock.PlanInDoubt:
			v.status, v.message = taskWorking, airlock.InDoubtMessage(g.m.Tool(p.Tool))
		default:
			v.status, v.result = taskCompleted, g.toolResult(g.routes[PlanPrefix+t.Tool], a)
		}
		return v, nil
	}
	rec, err := g.store.Get(ctx, t.RecordKey)
	switch {
	case errors.Is(err, airlock.ErrNotFound):
		// Settled as not having happened: the key is free again.
		v.status = taskCompleted
		v.result = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: messageReleased}},
			StructuredContent: map[string]any{"status": "released", "repeat": false, "message": messageReleased}}
		return v, nil
	case err != nil:
		return nil, err
	}
	v.updated = rec.UpdatedAt
	a := airlock.AnswerFor(rec, g.m.Tool(t.Tool), t.Repeat)
	if rec.State.Final() {
		v.status, v.result = taskCompleted, g.toolResult(g.routes[t.Tool], a)
	} else {
		v.status, v.message = taskWorking, taskMessageRunning
		if rec.State == airlock.StateInDoubt {
			v.message = a.Message
		}
	}
	return v, nil
}

// What a task that has not ended says, for a model.
const (
	taskMessageRunning  = "The call is under way; its result will be this task's result. It must not be redone."
	taskMessageAwaiting = "This is a proposal waiting for a person's approval; the task completes when the plan is decided (and, if approved, carried out). Do not propose it again."
	taskMessageApproved = "Approved; airlock is carrying it out. The task completes with its result."
)

// messageReleased is the result of a task whose call was found, after it
// was in doubt, not to have happened.
const messageReleased = "It did not happen: the call was in doubt and a person found that it was never done, so its key is free again. Nothing was done; calling again does the work."

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ttlMs is how long the task is kept from its creation, in milliseconds;
// nil when it is kept.
func (v *taskView) ttlMs() any {
	if v.task.ExpiresAt.IsZero() {
		return nil
	}
	return v.task.ExpiresAt.Sub(v.task.CreatedAt).Milliseconds()
}

// wireV2 is the Task of the 2026-07-28 extension (without its result).
func (v *taskView) wireV2() map[string]any { return v.wire("ttlMs", "pollIntervalMs") }

// detailedV2 is the 2026-07-28 DetailedTask: the Task, and its result when
// it completed.
func (v *taskView) detailedV2() map[string]any {
	m := v.wireV2()
	if v.status == taskCompleted && v.result != nil {
		m["result"] = v.result
	}
	return m
}

// wireV1 is the Task of 2025-11-25, whose durations have no unit in their
// names.
func (v *taskView) wireV1() map[string]any { return v.wire("ttl", "pollInterval") }

func (v *taskView) wire(ttl, poll string) map[string]any {
	m := map[string]any{
		"taskId": v.task.ID, "status": v.status,
		"createdAt": stamp(v.task.CreatedAt), "lastUpdatedAt": stamp(v.updated),
		ttl: v.ttlMs(), poll: v.pollMs,
	}
	if v.message != "" {
		m["statusMessage"] = v.message
	}
	return m
}

// rawResult is a result the SDK has no type for: its fields as given, and
// the _meta the SDK may add.
type rawResult struct {
	mcp.ResultBase
	fields map[string]any
}

func (r *rawResult) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(r.fields)+1)
	for k, v := range r.fields {
		out[k] = v
	}
	if len(r.Meta) > 0 {
		meta := map[string]any{}
		if m, ok := out["_meta"].(map[string]any); ok {
			for k, v := range m {
				meta[k] = v
			}
		}
		for k, v := range r.Meta {
			meta[k] = v
		}
		out["_meta"] = meta
	}
	return json.Marshal(out)
}

// taskParams are the parameters of the task methods.
type taskParams struct {
	mcp.ParamsBase
	TaskID         *string         `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
	Cursor         string          `json:"cursor,omitempty"`
}

// taskRPCError is a JSON-RPC error of the task methods.
func taskRPCError(code int64, format string, args ...any) error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// missingTasksCapability is the 2026-07-28 answer to a task method from a
// client that did not declare the extension on the request.
func missingTasksCapability(method string) error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{ExtTasks: map[string]any{}}}})
	return &jsonrpc.Error{Code: rpcMissingCapability,
		Message: fmt.Sprintf("Missing required client capability: %s needs the %s extension declared in the request's _meta[%q]", method, ExtTasks, metaClientCapabilities),
		Data:    data}
}

// principalOf is who makes a request: the session's owner, else the
// principal its HTTP request carried (a request without a session), else
// "" (stdio: the local user).
func (g *Gateway) principalOf(ctx context.Context, ss *mcp.ServerSession) string {
	if owner := g.sessions.ownerOf(sessionID(ss)); owner != "" {
		return owner
	}
	if p, ok := PrincipalFrom(ctx); ok {
		return p.Name
	}
	return ""
}

// taskRequest reads a task method's request: the flavor it is answered
// in, and the task it names, found among the principal's. Every problem
// is a JSON-RPC error that names it; nothing is changed.
func (g *Gateway) taskRequest(ctx context.Context, method string, ss *mcp.ServerSession, p *taskParams) (taskFlavor, *airlock.Task, error) {
	flavor := taskV1
	if newRevision(ss) {
		flavor = taskV2
		if method == "tasks/result" || method == "tasks/list" {
			// Not methods of the extension: dispatched as unknown, before
			// anything about the request is checked.
			return flavor, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
				Message: method + " is not a method of the 2026-07-28 Tasks extension: tasks/get carries the result, and there is no listing"}
		}
		if p == nil || !declaresTasks(p.Meta) {
			return flavor, nil, missingTasksCapability(method)
		}
	}
	if method == "tasks/list" {
		return flavor, nil, nil
	}
	if p == nil || p.TaskID == nil {
		return flavor, nil, taskRPCError(rpcInvalidParams, "invalid params: %s needs \"taskId\": the taskId a tools/call answered with", method)
	}
	id := *p.TaskID
	if !airlock.ValidTaskID(id) {
		return flavor, nil, taskRPCError(rpcInvalidParams, "invalid params: \"taskId\" %s is not a task id (want %s and 32 hex digits, as tools/call answered); nothing was done", quoteShort(id), airlock.TaskIDPrefix)
	}
	t, err := g.store.GetTask(ctx, id)
	if errors.Is(err, airlock.ErrNotFound) || (err == nil && t.Principal != g.principalOf(ctx, ss)) {
		// Another principal's task is not found either: a task id is not a
		// capability to read someone else's work.
		return flavor, nil, taskRPCError(rpcInvalidParams, "Failed to retrieve task: no task %q for this token (it was never made here, has expired, or belongs to another token)", id)
	}
	if err != nil {
		return flavor, nil, err
	}
	if !t.ExpiresAt.IsZero() && !g.clock.Now().Before(t.ExpiresAt) {
		// Purged with its record at the next pass, or already half gone:
		// either way not read as work that did not happen.
		return flavor, nil, taskRPCError(rpcInvalidParams, "Failed to retrieve task: task %q has expired (it was kept as long as its record)", id)
	}
	return flavor, t, nil
}

// quoteShort quotes a value for an error message, cut short.
func quoteShort(s string) string {
	return fmt.Sprintf("%q", airlock.Shorten(s, 80))
}

// registerTaskMethods adds tasks/get, tasks/result, tasks/list,
// tasks/cancel and tasks/update to the MCP server.
func (g *Gateway) registerTaskMethods(s *mcp.Server) error {
	handlers := map[string]func(context.Context, *mcp.ServerSession, *taskParams) (*rawResult, error){
		"tasks/get":    g.tasksGet,
		"tasks/result": g.tasksResult,
		"tasks/list":   g.tasksList,
		"tasks/cancel": g.tasksCancel,
		"tasks/update": g.tasksUpdate,
	}
	for method, h := range handlers {
		if err := mcp.AddReceivingCustomMethod(s, method, h); err != nil {
			return err
		}
	}
	return nil
}

func complete(fields map[string]any) *rawResult {
	fields["resultType"] = "complete"
	return &rawResult{fields: fields}
}

func (g *Gateway) tasksGet(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*rawResult, error) {
	flavor, t, err := g.taskRequest(ctx, "tasks/get", ss, p)
	if err != nil {
		return nil, err
	}
	v, err := g.viewTask(ctx, t)
	if err != nil {
		return nil, err
	}
	if flavor == taskV2 {
		return complete(v.detailedV2()), nil
	}
	return &rawResult{fields: v.wireV1()}, nil
}

// tasksResult (2025-11-25) waits for the task to end and answers with its
// result, as the call would have.
func (g *Gateway) tasksResult(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*rawResult, error) {
	_, t, err := g.taskRequest(ctx, "tasks/result", ss, p)
	if err != nil {
		return nil, err
	}
	w := g.newTaskWait(ctx, t)
	defer w.close()
	for {
		v, err := g.viewTask(ctx, t)
		if err != nil {
			return nil, err
		}
		if v.terminal() {
			if v.result == nil {
				// Cancelled: the plan was withdrawn.
				return nil, taskRPCError(rpcInvalidParams, "task %s was cancelled: %s", t.ID, v.message)
			}
			b, err := json.Marshal(v.result)
			if err != nil {
				return nil, err
			}
			var fields map[string]any
			if err := json.Unmarshal(b, &fields); err != nil {
				return nil, err
			}
			meta, _ := fields["_meta"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
			}
			meta[metaRelatedTask] = map[string]any{"taskId": t.ID}
			fields["_meta"] = meta
			return &rawResult{fields: fields}, nil
		}
		if err := w.next(ctx); err != nil {
			return nil, err
		}
	}
}

// A tasks/result waits for its task's work to move: a record's change is
// announced (the guard's wake-up, on every replica), so it is re-read then
// and every PollInterval besides; a plan's is not (a person decides it, the
// flow commits it), so it is re-read at first every taskPollFirst and
// then less often, up to every taskPollMost: a client may wait hours on a
// plan, and its wait should cost the store little.
const (
	taskPollFirst = 250 * time.Millisecond
	taskPollMost  = 2 * time.Second
)

// taskWait is one tasks/result's wait for its work to move.
type taskWait struct {
	clock   clockwork.Clock
	every   time.Duration // the next re-read's delay
	most    time.Duration // the longest delay
	changes recordChanges // a call's record; nil for a plan
}

// recordChanges is a record's changes (*guard.RecordWatch).
type recordChanges interface {
	C() <-chan struct{}
	Rearm()
	Stop()
}

func (g *Gateway) newTaskWait(ctx context.Context, t *airlock.Task) *taskWait {
	w := &taskWait{clock: g.clock, every: taskPollFirst, most: taskPollMost}
	if t.PlanID == "" && g.guard != nil {
		w.changes = g.guard.Watch(ctx, t.RecordKey)
		w.every, w.most = g.guard.PollInterval(), g.guard.PollInterval()
	}
	return w
}

// close ends the wait for the record's change.
func (w *taskWait) close() {
	if w.changes != nil {
		w.changes.Stop()
	}
}

// next returns when the work may have moved, or with the context's error.
func (w *taskWait) next(ctx context.Context) error {
	timer := w.clock.NewTimer(w.every)
	defer timer.Stop()
	w.every = min(2*w.every, w.most)
	var changed <-chan struct{} // none for a plan: never ready
	if w.changes != nil {
		changed = w.changes.C()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
		w.changes.Rearm()
	case <-timer.Chan():
	}
	return nil
}

// maxTaskPage is the page size of tasks/list.
const maxTaskPage = 50

// tasksList (2025-11-25) lists the principal's tasks, newest first.
func (g *Gateway) tasksList(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*rawResult, error) {
	_, _, err := g.taskRequest(ctx, "tasks/list", ss, p)
	if err != nil {
		return nil, err
	}
	cursor := ""
	if p != nil {
		cursor = p.Cursor
	}
	if _, _, err := airlock.ParseTaskCursor(cursor); err != nil {
		return nil, taskRPCError(rpcInvalidParams, "invalid params: \"cursor\" %s is not a cursor: want the nextCursor of the previous page", quoteShort(cursor))
	}
	tasks, err := g.store.ListTasks(ctx, &airlock.ListTasksParams{Principal: g.principalOf(ctx, ss), After: cursor, Limit: maxTaskPage})
	if err != nil {
		return nil, err
	}
	list := make([]any, 0, len(tasks))
	for _, t := range tasks {
		v, err := g.viewTask(ctx, t)
		if err != nil {
			return nil, err
		}
		list = append(list, v.wireV1())
	}
	out := map[string]any{"tasks": list}
	if len(tasks) == maxTaskPage {
		out["nextCursor"] = airlock.TaskCursor(tasks[len(tasks)-1])
	}
	return &rawResult{fields: out}, nil
}

// messageCannotStop says why a cancelled call goes on.
const messageCannotStop = "Cancellation was asked, but this call's side effect has already started and cannot be stopped: it goes on, and its result is kept (polling the task, or calling again with the same arguments, gets it)."

// messageNotProposer says why a plan goes on waiting when a task of
// another principal than its proposer is cancelled.
const messageNotProposer = "Cancellation was asked, but this plan was proposed by another principal, and only its proposer can withdraw it: it still waits for a person."

// tasksCancel withdraws a plan that still waits for a person, on its
// proposer's word; a call under way, or a plan already approved, goes on
// (the answer says so).
func (g *Gateway) tasksCancel(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*rawResult, error) {
	flavor, t, err := g.taskRequest(ctx, "tasks/cancel", ss, p)
	if err != nil {
		return nil, err
	}
	v, err := g.viewTask(ctx, t)
	if err != nil {
		return nil, err
	}
	note := ""
	switch {
	case v.terminal():
		if flavor == taskV1 {
			return nil, taskRPCError(rpcInvalidParams, "Cannot cancel task %s: it is already %s", t.ID, v.status)
		}
		note = "The task had already ended (" + v.status + "); nothing was changed."
	case v.plan != nil && v.plan.Status == airlock.PlanAwaitingApproval:
		_, _, err := g.plans.Withdraw(airlock.WithActor(ctx, t.Principal), t.PlanID, airlock.ActorOr(t.Principal))
		if errors.Is(err, airlock.ErrNotProposer) {
			// Another principal doing the same work has a task of its own
			// for the plan; withdrawing it is its proposer's word alone.
			note, v.message = messageNotProposer, messageNotProposer
			break
		}
		if err != nil {
			return nil, err
		}
		if v, err = g.viewTask(ctx, t); err != nil {
			return nil, err
		}
		note = "The plan was withdrawn; it will not be done."
		if v.status != taskCancelled {
			// A person decided it meanwhile.
			note = "The plan was decided before it could be withdrawn; it is " + string(v.plan.Status) + "."
		}
	default:
		note = messageCannotStop
		if v.message != "" {
			v.message = messageCannotStop + " " + v.message
		} else {
			v.message = messageCannotStop
		}
	}
	if flavor == taskV2 {
		// The extension's answer is an empty acknowledgement; what
		// happened rides in _meta, and tasks/get tells the rest.
		return complete(map[string]any{"_meta": map[string]any{metaNote: note}}), nil
	}
	return &rawResult{fields: v.wireV1()}, nil
}

// tasksUpdate (2026-07-28) takes input responses for a task. airlock's
// tasks never ask for input, so there is nothing outstanding to answer:
// the responses are acknowledged and ignored, as the extension asks of
// keys that are not outstanding.
func (g *Gateway) tasksUpdate(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*rawResult, error) {
	flavor, _, err := g.taskRequest(ctx, "tasks/update", ss, p)
	if err != nil {
		return nil, err
	}
	if flavor == taskV1 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tasks/update is a method of the 2026-07-28 Tasks extension, not of 2025-11-25"}
	}
	if len(p.InputResponses) > 0 && p.InputResponses[0] != '{' {
		return nil, taskRPCError(rpcInvalidParams, "invalid params: \"inputResponses\" must be an object keyed by the inputRequests' keys")
	}
	return complete(map[string]any{}), nil
}

// withTaskSupport adds what a 2025-11-25 client reads to know that tools
// may be called as tasks: the tasks capability (initialize) and each
// taskable tool's execution.taskSupport (tools/list).
func (g *Gateway) withTaskSupport(method string, ss *mcp.ServerSession, res mcp.Result) mcp.Result {
	if newRevision(ss) {
		return res
	}
	switch r := res.(type) {
	case *mcp.InitializeResult:
		fields, err := asFields(r)
		if err != nil {
			return res
		}
		caps, _ := fields["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
			"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
		fields["capabilities"] = caps
		return &rawResult{fields: fields}
	case *mcp.ListToolsResult:
		fields, err := asFields(r)
		if err != nil {
			return res
		}
		tools, _ := fields["tools"].([]any)
		for _, t := range tools {
			if tm, ok := t.(map[string]any); ok {
				if name, _ := tm["name"].(string); g.taskable(name) {
					tm["execution"] = map[string]any{"taskSupport": "optional"}
				}
			}
		}
		return &rawResult{fields: fields}
	}
	return res
}

func asFields(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(b, &m)
	return m, err
}
