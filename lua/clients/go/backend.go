package ratelab

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// moduleRecheck is how long BackendAuto trusts "the module is missing"
// before it tries the module again (a module loaded later, a failover to a
// node that has it).
const moduleRecheck = 30 * time.Second

// detection is what a limiter under BackendAuto knows of its server's
// module (or of its read-only twins).
type detection struct {
	state     atomic.Int32 // routeUnknown, routeModule, routeScripts
	recheckAt atomic.Int64 // monotonic µs
}

const (
	routeUnknown int32 = iota
	routeModule
	routeScripts
)

func (d *detection) route() int32 {
	switch d.state.Load() {
	case routeModule:
		return routeModule
	case routeScripts:
		if monotonicMicros() < d.recheckAt.Load() {
			return routeScripts
		}
	}
	return routeUnknown
}

func (d *detection) found() { d.state.Store(routeModule) }

func (d *detection) missing() {
	d.recheckAt.Store(monotonicMicros() + int64(moduleRecheck/time.Microsecond))
	d.state.Store(routeScripts)
}

// onceCmd is a command go-redis never sends twice: a script or module call
// may have run when its reply was lost, and a second run would charge
// again. (go-redis still re-runs it when the first connection failed before
// the command was written, and follows MOVED and ASK.)
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func runOnce(ctx context.Context, client redis.UniversalClient, args ...any) (any, error) {
	cmd := onceCmd{redis.NewCmd(ctx, args...)}
	_ = client.Process(ctx, cmd)
	return cmd.Result()
}

// isUnknownCommand: "ERR unknown command ...": the server has no such
// command (no module, or one older than the read-only twins).
func isUnknownCommand(err error) bool {
	return isErrorReply(err) && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// isOtherVersion: "ratelab: protocol version ...": a module of another
// protocol version refused the call (nothing decided or written).
func isOtherVersion(err error) bool {
	return isErrorReply(err) && strings.HasPrefix(err.Error(), "ratelab: protocol version ")
}

func isNoScript(err error) bool {
	return isErrorReply(err) && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// probeModule asks a single node's RATELAB.PROTOCOL: true when the module
// is loaded and speaks this client's version, exactly (each version refuses
// the others' calls).
func (l *Limiter) probeModule(ctx context.Context) (bool, error) {
	version, err := l.client.Do(ctx, "RATELAB.PROTOCOL").Result()
	switch {
	case err == nil:
		v, ok := version.(int64)
		return ok && v == int64(ProtocolVersion()), nil
	case isUnknownCommand(err):
		return false, nil
	default:
		return false, err
	}
}

// moduleFirst: whether the call goes to the module first. A single node is
// asked RATELAB.PROTOCOL; a cluster (whose keyless probe would reach a
// random node) tries the module's command itself, routed by its key.
func (l *Limiter) moduleFirst(ctx context.Context) (bool, error) {
	switch l.backend {
	case BackendScripts:
		return false, nil
	case BackendModule:
		return true, nil
	}
	switch l.detection.route() {
	case routeModule:
		return true, nil
	case routeScripts:
		return false, nil
	}
	if l.multiNode {
		return true, nil
	}
	found, err := l.probeModule(ctx)
	if err != nil {
		return false, err
	}
	if found {
		l.detection.found()
	} else {
		l.detection.missing()
	}
	return found, nil
}

// invoke sends one call's arguments for key: to the module's command when
// the backend says so, else (or when the module turns out to be missing) to
// the script, loading it after NOSCRIPT. A peek goes to the module's
// read-only twin, or to its command on a module older than the twins.
func (l *Limiter) invoke(ctx context.Context, key string, args []any, peek bool) (any, error) {
	twin := peek && l.peekTwin.route() != routeScripts
	for {
		first, err := l.moduleFirst(ctx)
		if err != nil {
			return nil, err
		}
		if !first {
			break
		}
		command := l.moduleCommand
		if twin {
			command = l.peekCommand
		}
		l.counters.moduleCalls.Add(1)
		reply, err := runOnce(ctx, l.client, append([]any{command, key}, args...)...)
		switch {
		case err == nil:
			if l.backend == BackendAuto && l.detection.route() != routeModule {
				l.detection.found()
			}
			return reply, nil
		case twin && isUnknownCommand(err):
			// A module older than the twins, or none: the command itself
			// says which.
			l.peekTwin.missing()
			twin = false
			continue
		case isUnknownCommand(err) || isOtherVersion(err):
			if l.backend == BackendModule {
				what := "is not loaded"
				if isOtherVersion(err) {
					what = "speaks another protocol version"
				}
				return nil, newError(ErrData, err, "the ratelab module %s on this Redis (%s answered %q): load this version's "+
					"(redis-server --loadmodule libratelab_redis_module.so) or use BackendAuto or BackendScripts", what, command, err.Error())
			}
			// Gone (a restart or failover onto a node without it), never
			// there on this cluster node, or of another version: the script.
			l.detection.missing()
		default:
			return nil, err
		}
		break
	}
	l.counters.scriptCalls.Add(1)
	evalsha := append([]any{"EVALSHA", l.sha, 1, key}, args...)
	reply, err := runOnce(ctx, l.client, evalsha...)
	if err == nil || !isNoScript(err) {
		return reply, err
	}
	// SCRIPT FLUSH, a restart, a failover, a cluster node that never saw
	// it: load it (on every master of a cluster) and send the same call.
	l.counters.reloads.Add(1)
	if err := l.client.ScriptLoad(ctx, l.source).Err(); err != nil {
		return nil, err
	}
	return runOnce(ctx, l.client, evalsha...)
}

// errAbandoned: the caller gave up before the script was sent.
var errAbandoned = errors.New("the caller gave up before the call was sent")
