/*-------------------------------------------------------------------------
 *
 * heartbeat.c
 *	  The claims' heartbeat: one flag in shared memory that says a claim ran
 *	  since the sweeper last looked.
 *
 * Every call that writes claims (claim_writer.c: single claims, batches,
 * claims by offset, in any database) sets it; the sweeper takes it (reads
 * and clears it) after each batch and so learns whether a claim ran during
 * that batch or the pause before it (sweep_pace.c).  A claim writes the
 * flag only when it finds it clear, at most once per batch of the sweeper,
 * and otherwise only reads it: the heartbeat costs a claim one read of a
 * cache line that is hardly ever written.  It knows nothing of the rate of
 * claims, only that some ran.
 *
 * Without shared memory (dedup not preloaded) there is no sweeper and the
 * heartbeat does nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "claim/claim.h"

typedef struct HeartbeatShared
{
	pg_atomic_uint32 claimed;	/* a claim ran since the sweeper took it */
} HeartbeatShared;

static HeartbeatShared *heartbeat = NULL;

/* shmem_request_hook part: reserve what dedup_heartbeat_shmem_startup uses */
void
dedup_heartbeat_shmem_request(void)
{
	RequestAddinShmemSpace(sizeof(HeartbeatShared));
}

/* shmem_startup_hook part: create or attach to the heartbeat */
void
dedup_heartbeat_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	heartbeat = ShmemInitStruct("dedup claims heartbeat",
								sizeof(HeartbeatShared), &found);
	if (!found)
		pg_atomic_init_u32(&heartbeat->claimed, 0);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * A call that writes claims is running: set the flag, unless it is set
 * already (a race between two claims writes 1 twice, which is harmless).
 */
void
dedup_claims_heartbeat(void)
{
	if (heartbeat != NULL &&
		pg_atomic_read_u32(&heartbeat->claimed) == 0)
		pg_atomic_write_u32(&heartbeat->claimed, 1);
}

/*
 * Whether a claim ran since the last call (false without shared memory),
 * clearing the flag.
 */
bool
dedup_claims_heartbeat_take(void)
{
	return heartbeat != NULL &&
		pg_atomic_exchange_u32(&heartbeat->claimed, 0) != 0;
}
