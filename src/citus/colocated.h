/*-------------------------------------------------------------------------
 *
 * colocated.h
 *	  Records kept in distributed tables colocated with the business rows
 *	  on a Citus cluster: the registry and the shape of records tables
 *	  (registry.c), their sweep and their storage figures
 *	  (colocated_sweep.c); their creation (colocated_ddl.c) and the claims
 *	  routed by key (colocated.c, routed_plan.c) are SQL entry points.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_COLOCATED_H
#define DEDUP_COLOCATED_H

#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "tables/relations.h"

extern List *dedup_colocated_tables(const DedupRelations *rels);
extern void dedup_colocated_check_node(const char *function);
extern Relation dedup_registry_open(const DedupRelations **rels);
extern bool dedup_registry_has(Relation registry, Oid records);
extern Oid	dedup_check_records_table(Relation rel);
extern char *dedup_colocated_check_table(Oid records, LOCKMODE lockmode);
extern uint64 dedup_colocated_sweep_table(const DedupRelations *rels,
										  Oid records);

#endif							/* DEDUP_COLOCATED_H */
