/*-------------------------------------------------------------------------
 *
 * colocated.h
 *	  Records kept in distributed tables colocated with the business rows
 *	  on a Citus cluster: their creation and registry, the claims routed by
 *	  key, their sweep and their storage figures (colocated.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_COLOCATED_H
#define DEDUP_COLOCATED_H

#include "nodes/pg_list.h"

#include "relations.h"

extern List *dedup_colocated_tables(const DedupRelations *rels);
extern uint64 dedup_colocated_sweep_table(const DedupRelations *rels,
										  Oid records);

#endif							/* DEDUP_COLOCATED_H */
