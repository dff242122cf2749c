package gateway

import (
	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

// routeKind is what a call of an exposed name does.
type routeKind int

const (
	routeRead       routeKind = iota + 1 // passes through to its upstream
	routeWrite                           // the guarded call
	routePlan                            // plan_T: proposes irreversible T
	routePlanStatus                      // plan_status: reports a plan
	routeCaller                          // a write its caller runs, through the claims API only
)

// route is one name an agent may call, resolved once when the gateway is
// built: the tool behind it, what a call does, its upstream and its
// schema, and the name and kind its metrics count it under.
type route struct {
	name   string // as exposed: T, plan_T or plan_status
	kind   routeKind
	tool   *airlock.Tool   // nil for plan_status
	caller upstream.Caller // reads and writes; nil: no upstream configured
	schema *argsSchema     // the tool's (T's for plan_T); nil for plan_status
	// metricName and metricKind are what the call is counted as: plan_T
	// counts as T, irreversible.
	metricName string
	metricKind airlock.ToolKind
}

// taskable says whether a call of the route may become an MCP task.
func (r *route) taskable() bool { return r.kind == routeWrite || r.kind == routePlan }

// buildRoutes resolves every name an agent may call. Irreversible tools are
// exposed only as plan_T, and only where plans are enabled.
func (g *Gateway) buildRoutes() {
	g.routes = map[string]*route{}
	for _, t := range g.m.Tools {
		switch t.Kind {
		case airlock.KindIrreversible:
			if g.plans != nil {
				g.routes[PlanPrefix+t.Name] = &route{name: PlanPrefix + t.Name, kind: routePlan, tool: t,
					schema: g.schemas[t.Name], metricName: t.Name, metricKind: airlock.KindIrreversible}
			}
		default:
			kind := routeWrite
			switch {
			case t.RunByCaller():
				kind = routeCaller
			case t.Kind == airlock.KindRead:
				kind = routeRead
			}
			g.routes[t.Name] = &route{name: t.Name, kind: kind, tool: t, caller: g.callers[t.Name],
				schema: g.schemas[t.Name], metricName: t.Name, metricKind: t.Kind}
		}
	}
	if g.plans != nil {
		g.routes[PlanStatusTool] = &route{name: PlanStatusTool, kind: routePlanStatus, metricName: PlanStatusTool, metricKind: airlock.KindRead}
	}
}
