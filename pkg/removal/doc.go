// Package removal answers one question at hotplugd's SIGTERM: is this stop
// hotplugd's removal (an uninstall), or one it comes back from (an update,
// a restart, a drain, a reboot)? At a removal hotplugd takes its condition
// and annotations off its Node (nodepatch.Prune) while its credentials
// still work; at any other stop it leaves them, so the next hotplugd finds
// its condition's transition time and sends no second Event.
//
// It is a package of its own because the answer comes from whatever
// installed hotplugd, not from the machine or the Node: the DaemonSet
// object (gone, or being deleted) or the systemd unit (disabled, as
// `systemctl disable --now` does before it stops the unit). Where it cannot
// tell, the answer is "not a removal" and the error says so: the uninstall
// then runs `hotplugd prune` itself.
package removal
