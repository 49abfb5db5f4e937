//go:build chaos

package actors

func init() {
	takeDowns = append(takeDowns,
		takeDown{"panic", "server_actor_restart", (*Fleet).CrashServer},
		takeDown{"poison", "server_actor_respawn", (*Fleet).PoisonServer},
	)
}
