/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  What differs between the PostgreSQL versions dedup builds on (15 to
 *	  18), in one place: each difference behind one name that the rest of
 *	  the code uses on every version.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_COMPAT_H
#define DEDUP_COMPAT_H

#include "access/tableam.h"
#include "catalog/pg_namespace.h"
#include "storage/proc.h"
#include "utils/guc_tables.h"
#include "utils/wait_event.h"

/* the varlena macros (VARDATA_ANY...) left postgres.h for varatt.h in 16 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* the local ID of this backend's top-level transaction (17 moved it) */
#if PG_VERSION_NUM >= 170000
#define dedup_local_xid() (MyProc->vxid.lxid)
#else
#define dedup_local_xid() (MyProc->lxid)
#endif

/* 17 replaced the IsBackgroundWorker flag by the backend type */
#if PG_VERSION_NUM >= 170000
#define dedup_is_background_worker() AmBackgroundWorkerProcess()
#else
#define dedup_is_background_worker() IsBackgroundWorker
#endif

/* dedup.c's module magic block: 18 records the library's name and version */
#if PG_VERSION_NUM >= 180000
#define DEDUP_MODULE_MAGIC(name_, version_) \
	PG_MODULE_MAGIC_EXT(.name = (name_), .version = (version_))
#else
#define DEDUP_MODULE_MAGIC(name_, version_) PG_MODULE_MAGIC
#endif

/* an index scan without instrumentation or ordering (18 added the former) */
#if PG_VERSION_NUM >= 180000
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif

/*
 * ON CONFLICT's first look for a conflict through the arbiter indexes
 * (NIL: every unique index and exclusion constraint), without the row being
 * updated that 18 added for ON CONFLICT DO UPDATE
 */
#if PG_VERSION_NUM >= 180000
#define dedup_check_index_constraints(result_rel, slot, estate, conflict_tid, arbiters) \
	ExecCheckIndexConstraints((result_rel), (slot), (estate), (conflict_tid), \
							  NULL, (arbiters))
#else
#define dedup_check_index_constraints(result_rel, slot, estate, conflict_tid, arbiters) \
	ExecCheckIndexConstraints((result_rel), (slot), (estate), (conflict_tid), \
							  (arbiters))
#endif

/*
 * The index entries of a speculatively inserted tuple, in every index, a
 * conflict in an arbiter (NIL: every unique index and exclusion constraint)
 * reported in *spec_conflict, in any other index raised (16 can insert into
 * the summarizing indexes only, for HOT updates)
 */
#if PG_VERSION_NUM >= 160000
#define dedup_insert_index_tuples(result_rel, slot, estate, spec_conflict, arbiters) \
	ExecInsertIndexTuples((result_rel), (slot), (estate), false, true, \
						  (spec_conflict), (arbiters), false)
#else
#define dedup_insert_index_tuples(result_rel, slot, estate, spec_conflict, arbiters) \
	ExecInsertIndexTuples((result_rel), (slot), (estate), false, true, \
						  (spec_conflict), (arbiters))
#endif

/*
 * Which index entries the new version of an updated row needs, as
 * simple_table_tuple_update answers (16 tells updates that need entries in
 * the summarizing indexes only from those that need them in every index),
 * and inserting them: the entries of a non-HOT update.  Not flagged as an
 * update (indexUnchanged false): that only hints the index AM that the key
 * is unchanged, and finding out needs a range table.
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes DedupUpdateIndexes;
#define dedup_update_needs_indexes(update_indexes) \
	((update_indexes) != TU_None)
#define dedup_insert_update_index_tuples(result_rel, slot, estate, update_indexes) \
	ExecInsertIndexTuples((result_rel), (slot), (estate), false, false, NULL, \
						  NIL, (update_indexes) == TU_Summarizing)
#else
typedef bool DedupUpdateIndexes;
#define dedup_update_needs_indexes(update_indexes) (update_indexes)
#define dedup_insert_update_index_tuples(result_rel, slot, estate, update_indexes) \
	ExecInsertIndexTuples((result_rel), (slot), (estate), false, false, NULL, \
						  NIL)
#endif

/* a privilege check on a schema (16 made it one for every kind of object) */
#if PG_VERSION_NUM >= 160000
#define dedup_namespace_aclcheck(nspid, roleid, mode) \
	object_aclcheck(NamespaceRelationId, (nspid), (roleid), (mode))
#else
#define dedup_namespace_aclcheck(nspid, roleid, mode) \
	pg_namespace_aclcheck((nspid), (roleid), (mode))
#endif

/* does roleid own the table relid (16 made it one check for every kind) */
#if PG_VERSION_NUM >= 160000
#define dedup_class_ownercheck(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#else
#define dedup_class_ownercheck(relid, roleid) \
	pg_class_ownercheck((relid), (roleid))
#endif

/*
 * The settings that only some versions have, which the sweeper sets for
 * its transactions: entries of its list (sweeper.c), as {name, value}.
 */
#if PG_VERSION_NUM >= 170000
#define DEDUP_SWEEPER_VERSION_SETTINGS \
	{"transaction_timeout", "0"},
#else
#define DEDUP_SWEEPER_VERSION_SETTINGS
#endif

/*
 * Every GUC variable, as an array of *num (16 made get_guc_variables()
 * count them itself, and return a sorted copy)
 */
#if PG_VERSION_NUM >= 160000
#define dedup_guc_variables(num) get_guc_variables(num)
#else
#define dedup_guc_variables(num) \
	(*(num) = GetNumConfigOptions(), get_guc_variables())
#endif

/*
 * a table's live and dead row counts and its VACUUMs (by hand and by
 * autovacuum) in the statistics (16 renamed them)
 */
#if PG_VERSION_NUM >= 160000
#define dedup_tabentry_live_tuples(entry) ((double) (entry)->live_tuples)
#define dedup_tabentry_dead_tuples(entry) ((double) (entry)->dead_tuples)
#define dedup_tabentry_vacuums(entry) \
	((entry)->vacuum_count + (entry)->autovacuum_count)
#else
#define dedup_tabentry_live_tuples(entry) ((double) (entry)->n_live_tuples)
#define dedup_tabentry_dead_tuples(entry) ((double) (entry)->n_dead_tuples)
#define dedup_tabentry_vacuums(entry) \
	((entry)->vacuum_count + (entry)->autovac_vacuum_count)
#endif

/*
 * The wait event of a wait of the background workers: on 17 and later one
 * with a name of its own in pg_stat_activity (registered once per process,
 * *event caches it); before, every extension wait is "Extension".
 */
static inline uint32
dedup_wait_event(const char *name, uint32 *event)
{
#if PG_VERSION_NUM >= 170000
	if (*event == 0)
		*event = WaitEventExtensionNew(name);
	return *event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * A logical decoding message in WAL, not flushed at once (17 added the
 * choice); replication/message.h declares it
 */
#if PG_VERSION_NUM >= 170000
#define dedup_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional), false)
#else
#define dedup_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional))
#endif

/*
 * The sequence of an identity column (17 takes the relation, not its OID);
 * catalog/dependency.h declares it
 */
#if PG_VERSION_NUM >= 170000
#define dedup_identity_sequence(rel, attnum) \
	getIdentitySequence((rel), (attnum), true)
#else
#define dedup_identity_sequence(rel, attnum) \
	getIdentitySequence(RelationGetRelid(rel), (attnum), true)
#endif

#endif							/* DEDUP_COMPAT_H */
