/*-------------------------------------------------------------------------
 *
 * citus.h
 *	  What Citus manages and where this backend runs: the refusals that keep
 *	  dedup from being silently wrong on a Citus cluster, and the two-phase
 *	  commit of a claim made in a distributed transaction (citus.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CITUS_H
#define DEDUP_CITUS_H

#include "access/attnum.h"

#include "tables/relations.h"

extern void dedup_citus_check(const DedupRelations *rels);
extern int32 dedup_citus_group(void);
extern bool dedup_citus_reading_only(bool on);
extern void dedup_citus_routed_write(void);
extern bool dedup_citus_distributed(Oid relid);
extern AttrNumber dedup_citus_hash_column(Oid relid);

#endif							/* DEDUP_CITUS_H */
