/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  The dedup.* configuration parameters.
 *
 * Everything the sweeper reads can change with a reload (SIGHUP) and is
 * taken into account at the next sweep; only dedup.max_databases, which
 * sizes shared memory, needs a restart.  None of them can be set by
 * ordinary roles: PGC_SIGHUP parameters are changed in postgresql.conf or
 * with ALTER SYSTEM, never with SET, ALTER ROLE or ALTER DATABASE.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "guc.h"

bool		dedup_sweep_enabled = true;
int			dedup_retention = 7 * 24 * 60 * 60;
int			dedup_sweep_interval = 60;
int			dedup_sweep_batch_size = 1000;
int			dedup_sweep_max_duration = 60;
int			dedup_sweep_batch_delay = 0;
int			dedup_sweep_busy_share = 10;
double		dedup_sweep_vacuum_threshold = 0.2;
char	   *dedup_databases = NULL;
char	   *dedup_sweep_role = NULL;
int			dedup_max_databases = 64;
bool		dedup_track_claims = true;
bool		dedup_require_consumer_roles = false;
int			dedup_max_consumers = 1000;

/* dedup.databases must be a list of identifiers: "db1, db2, ..." */
static bool
check_databases(char **newval, void **extra, GucSource source)
{
	char	   *rawstring = pstrdup(*newval);
	List	   *names;
	bool		ok = SplitIdentifierString(rawstring, ',', &names);

	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	list_free(names);
	pfree(rawstring);
	return ok;
}

void
dedup_define_gucs(void)
{
	DefineCustomBoolVariable("dedup.sweep_enabled",
							 "Whether the retention worker sweeps expired processed_messages rows.",
							 NULL,
							 &dedup_sweep_enabled,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.retention",
							"How long a claim is kept, counted back from the consumer's latest claim.",
							"Consumers with their own window (dedup_set_retention) ignore it; -1 keeps claims forever.",
							&dedup_retention,
							7 * 24 * 60 * 60, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.sweep_interval",
							"Time between two sweeps of a database.",
							NULL,
							&dedup_sweep_interval,
							60, 1, 24 * 60 * 60,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.sweep_batch_size",
							"Most rows a sweep deletes in one transaction.",
							NULL,
							&dedup_sweep_batch_size,
							1000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.sweep_max_duration",
							"Longest time one sweep of a database may run; the rest waits for the next sweep.",
							"0 means no limit.",
							&dedup_sweep_max_duration,
							60, 0, 24 * 60 * 60,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.sweep_batch_delay",
							"Pause of a sweep between two batches, leaving the CPU and the disk to claims.",
							"0 means no pause.",
							&dedup_sweep_batch_delay,
							0, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dedup.sweep_busy_share",
							"Percentage of the time a sweep works while claims run; it pauses the rest.",
							"100 means that a sweep never yields to claims.",
							&dedup_sweep_busy_share,
							10, 1, 100,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomRealVariable("dedup.sweep_vacuum_threshold",
							 "Fraction of processed_messages' live rows that must be dead after a sweep for the sweeper to vacuum it.",
							 "Added to autovacuum_vacuum_threshold, as autovacuum_vacuum_scale_factor is; 0 means that the sweeper never vacuums.",
							 &dedup_sweep_vacuum_threshold,
							 0.2, 0.0, 100.0,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("dedup.databases",
							   "Databases to sweep, comma-separated; empty means every database where dedup is installed.",
							   NULL,
							   &dedup_databases,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_databases, NULL, NULL);

	DefineCustomStringVariable("dedup.sweep_role",
							   "Role whose privileges the sweep runs with; empty means the owner of processed_messages.",
							   NULL,
							   &dedup_sweep_role,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	/* a superuser may turn counting off, e.g. to measure what it costs */
	DefineCustomBoolVariable("dedup.track_claims",
							 "Whether claims are counted for the dedup_stats view.",
							 NULL,
							 &dedup_track_claims,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/*
	 * Only a superuser may loosen who claims for whom; a role that could SET
	 * it could claim for any consumer.
	 */
	DefineCustomBoolVariable("dedup.require_consumer_roles",
							 "Whether only roles mapped to a consumer in dedup_consumer_roles may claim for it.",
							 "Off: consumers without a mapping may be claimed for by every role with EXECUTE on dedup_claim.",
							 &dedup_require_consumer_roles,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	/* these size shared memory, which only a preloaded library has */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("dedup.max_databases",
								"Most databases the sweeper keeps track of.",
								NULL,
								&dedup_max_databases,
								64, 1, 10000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
		DefineCustomIntVariable("dedup.max_consumers",
								"Most (database, consumer) pairs whose claims are counted.",
								NULL,
								&dedup_max_consumers,
								1000, 10, 1000000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
	}

	MarkGUCPrefixReserved("dedup");
}
