/*-------------------------------------------------------------------------
 *
 * dedup.c
 *	  Module entry point of the dedup extension: it defines the parameters
 *	  (guc.c, the outbox's in outbox/maintain.c), wires the shared-memory
 *	  hooks to the subsystems that own shared memory (sweeper_state.c,
 *	  claim_stats.c, heartbeat.c), sets the Citus guard that every lookup
 *	  of the extension's tables runs (citus.c, relations.c), has the claims
 *	  tell the outbox of each successful claim (claim.c, outbox/origin.c)
 *	  and registers the launcher.
 *
 * The library can be loaded on demand (the first dedup_claim() call in a
 * backend) or through shared_preload_libraries; claims work either way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "citus/citus.h"
#include "claim/claim.h"
#include "compat.h"
#include "guc.h"
#include "outbox/outbox.h"
#include "stats/claim_stats.h"
#include "sweeper/sweeper.h"

DEDUP_MODULE_MAGIC("dedup", "1.5");

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* shmem_request_hook: each subsystem reserves its own shared memory */
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	dedup_sweeper_shmem_request();
	dedup_claim_stats_shmem_request();
	dedup_heartbeat_shmem_request();
}

/* shmem_startup_hook: each subsystem creates or attaches to its own */
static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	dedup_sweeper_shmem_startup();
	dedup_claim_stats_shmem_startup();
	dedup_heartbeat_shmem_startup();
}

/*
 * Loaded on demand, the library defines its parameters and sets the Citus
 * guard, and nothing else.
 * Preloaded, it also sets up the shared memory of the sweeper and of the
 * claim counters, and registers the launcher -- except in binary-upgrade
 * mode, where nothing may be written.
 */
void
_PG_init(void)
{
	/* the outbox's settings first: the others end by reserving "dedup." */
	dedup_outbox_define_gucs();
	dedup_define_gucs();
	/* the outbox derives its messages' ids from the transaction's claim */
	dedup_observe_claims(dedup_outbox_note_claim);
	/* every lookup of the extension's tables refuses a wrong Citus layout */
	dedup_relations_guard(dedup_citus_check);

	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;

	dedup_register_launcher();
}
