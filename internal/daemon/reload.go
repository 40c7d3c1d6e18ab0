package daemon

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/tlsauth"
)

// reload applies the configuration file again (SIGHUP, systemctl reload):
// its images (image and [images]) and the TLS listener's certificate, CA
// and clients; a change to any other key is logged as needing a restart.
// A configuration that does not load, or an image that is missing,
// misnamed or tampered with, fails the whole reload and the daemon goes
// on as before. Its outcome goes to the log, the metrics and the reload
// status that `jaild reload` waits for, before systemd hears READY=1.
func (d *Daemon) reload() {
	started := monotonicUsec()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading+"\nMONOTONIC_USEC="+strconv.FormatInt(started, 10))
	err := d.applyConfig()
	d.noteReload(started, err)
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving images "+d.imgs.names())
}

// applyConfig is reload's work; its error says why the reload was refused
// (nothing changed) or applied only in part.
func (d *Daemon) applyConfig() error {
	cur, log, srv := d.cfg, d.log, d.srv
	refuse := func(msg string, err error, args ...any) error {
		log.Error("reload refused: "+msg+"; nothing changed", append([]any{"err", err}, args...)...)
		srv.NoteReload(false)
		return fmt.Errorf("%s; nothing changed: %w", msg, err)
	}
	next, err := d.opts.Load()
	if err != nil {
		return refuse("the configuration does not load", err)
	}
	if keys := next.NeedRestart(cur); len(keys) > 0 {
		log.Warn("reload: these settings changed and take effect only at a restart", "keys", strings.Join(keys, ","))
	}
	applied := cur
	applied.Image, applied.Images = next.Image, next.Images
	applied.TLS.Cert, applied.TLS.Key, applied.TLS.ClientCA, applied.TLS.Clients = next.TLS.Cert, next.TLS.Key, next.TLS.ClientCA, next.TLS.Clients
	var tlsState *tlsauth.State
	if d.auth != nil {
		if tlsState, err = tlsauth.Load(applied); err != nil {
			return refuse("the TLS listener's files do not load", err)
		}
	}
	if err := applied.Validate(); err != nil {
		// next's images checked against cur's settings (its maxima, ...),
		// which stay in force until a restart.
		return refuse("the images do not fit the settings in force", err)
	}
	changed, err := d.imgs.apply(applied, d.engine, func() { srv.SetImages(applied) })
	if !changed {
		return refuse("the images do not apply", err, "images", d.imgs.names())
	}
	if tlsState != nil {
		d.auth.Set(tlsState) // new connections get the new certificate, CA and clients
	}
	srv.NoteReload(err == nil)
	d.cfg = applied
	if err != nil {
		// Every image was mounted, yet one could not be committed or
		// removed (the daemon is closing): the others are applied.
		log.Error("reload: an image could not be applied", "err", err, "images", d.imgs.names())
		return fmt.Errorf("applied in part: an image could not be applied: %w", err)
	}
	log.Info("reloaded", "images", d.imgs.names())
	return nil
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, which systemd wants
// with RELOADING=1.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1000
}
