/*-------------------------------------------------------------------------
 *
 * citus.h
 *	  What Citus manages and where this backend runs: the refusals that keep
 *	  dedup from being silently wrong on a Citus cluster, and the two-phase
 *	  commit of a claim made in a distributed transaction (citus.c); records
 *	  kept in distributed tables colocated with the business rows: the
 *	  registry and the shape of records tables (registry.c), their sweep and
 *	  their storage figures (colocated_sweep.c); their creation
 *	  (colocated_ddl.c) and the claims routed by key (colocated.c,
 *	  routed_plan.c) are SQL entry points.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CITUS_H
#define DEDUP_CITUS_H

#include "access/attnum.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "tables/relations.h"

extern void dedup_citus_check(const DedupRelations *rels);
extern int32 dedup_citus_group(void);
extern bool dedup_citus_reading_only(bool on);
extern void dedup_citus_routed_write(void);
extern bool dedup_citus_distributed(Oid relid);
extern AttrNumber dedup_citus_hash_column(Oid relid);

/* colocated records tables (registry.c, colocated_sweep.c) */
extern List *dedup_colocated_tables(const DedupRelations *rels);
extern void dedup_colocated_check_node(const char *function);
extern Relation dedup_registry_open(const DedupRelations **rels);
extern bool dedup_registry_has(Relation registry, Oid records);
extern Oid	dedup_check_records_table(Relation rel);
extern char *dedup_colocated_check_table(Oid records, LOCKMODE lockmode);
extern uint64 dedup_colocated_sweep_table(const DedupRelations *rels,
										  Oid records);

#endif							/* DEDUP_CITUS_H */
