/*-------------------------------------------------------------------------
 *
 * dedup.c
 *	  Module entry point of the dedup extension.
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

#include "dedup.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

#if PG_VERSION_NUM >= 150000
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	dedup_shmem_request();
}
#endif

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	dedup_shmem_startup();
}

/*
 * Loaded on demand, the library defines its parameters and nothing else.
 * Preloaded, it also sets up the sweeper's shared memory and registers the
 * launcher -- except in binary-upgrade mode, where nothing may be written.
 */
void
_PG_init(void)
{
	dedup_define_gucs();

	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;

#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
#else
	dedup_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;

	dedup_register_launcher();
}
